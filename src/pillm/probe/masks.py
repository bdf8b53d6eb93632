"""Row policy: which captured FFN rows a probe fit measures.

A block's typical input is an ordinary token in the middle of a window. Two kinds of rows are
not: the tokenizer's structural tokens (BOS/EOS/padding, BERT's [CLS]/[SEP]), whose FFN outputs
are often orders of magnitude larger than the rest, and the first position of a window, which
causal models use as an attention sink whatever token sits there, and the few later rows that take
over as sinks in some windows, recognisable by FFN outputs far above the typical row ("massive
activations": ``exclude_massive`` times the batch's median row norm). A handful of such rows can
carry most of a block's output variance, so a fit that pools them measures them. The policy
(``probe.rows`` in the config) leaves them out of the fit and of its held-out score; the probe
fits all rows beside it, so the effect stays visible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from pillm.probe.config import ProbeRowsConfig


def describe(policy: ProbeRowsConfig) -> str:
    """A short plain-text name of the policy: 'special+pos0+massive20', 'pos0,-1', 'all rows'."""
    parts = ["special"] if policy.exclude_special else []
    if policy.exclude_positions:
        parts.append("pos" + ",".join(str(p) for p in policy.exclude_positions))
    if policy.exclude_massive > 0:
        parts.append(f"massive{policy.exclude_massive:g}")
    return "+".join(parts) or "all rows"


def massive_rows(y: Tensor, factor: float) -> Tensor:
    """Rows whose output norm exceeds ``factor`` times the median row norm of ``y`` (m, k)."""
    norm = y.detach().float().norm(dim=1)
    return norm > factor * norm.median()


@dataclass(frozen=True)
class RowMask:
    """The row policy applied to a batch: by token (structural ids, window positions), then per
    block by output norm (massive-activation rows: attention sinks away from position 0)."""

    special: tuple[int, ...]
    positions: tuple[int, ...]
    massive: float

    def __call__(self, ids: Tensor) -> Tensor:
        """Token ids (B, T) -> keep (B, T) by token and position."""
        if ids.ndim != 2:
            raise ValueError(f"row mask: expected token ids (batch, positions), got {ids.shape}")
        t = ids.shape[1]
        table = torch.tensor(self.special, dtype=torch.long, device=ids.device)
        mask = ~torch.isin(ids, table)
        for p in self.positions:
            if not -t <= p < t:
                raise ValueError(
                    f"probe.rows.exclude_positions: position {p} lies outside windows of {t} "
                    "tokens (probe.seq_len); use positions in [-seq_len, seq_len)"
                )
            mask[:, p] = False
        return mask

    def rows(self, keep: Tensor | None, y: Tensor) -> Tensor:
        """One block's keep flags (m,): the token flags ``keep`` (None: all), less its
        massive-activation rows when ``massive`` > 0."""
        out = torch.ones(len(y), dtype=torch.bool, device=y.device) if keep is None else keep
        if self.massive > 0:
            out = out & ~massive_rows(y, self.massive)
        return out

    def massive_only(self, keep: Tensor | None, y: Tensor) -> Tensor:
        """One block's rows that only the massive-activation rule leaves out (kept by token,
        massive by output norm): what the policy would keep without that rule, less ``rows``."""
        token = torch.ones(len(y), dtype=torch.bool, device=y.device) if keep is None else keep
        if self.massive <= 0:
            return torch.zeros_like(token)
        return token & massive_rows(y, self.massive)


def row_mask(policy: ProbeRowsConfig, special_ids: Iterable[int]) -> RowMask | None:
    """The policy for a model whose tokenizer's structural ids are ``special_ids``; None when it
    keeps every row."""
    special = tuple(sorted(set(special_ids))) if policy.exclude_special else ()
    positions = tuple(policy.exclude_positions)
    if not special and not positions and policy.exclude_massive <= 0:
        return None
    return RowMask(special, positions, float(policy.exclude_massive))
