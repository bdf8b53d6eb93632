"""Row policy: which captured FFN rows a probe fit measures.

A block's typical input is an ordinary token in the middle of a window. Two kinds of rows are
not: the tokenizer's structural tokens (BOS/EOS/padding, BERT's [CLS]/[SEP]), whose FFN outputs
are often orders of magnitude larger than the rest, and the first position of a window, which
causal models use as an attention sink whatever token sits there. A handful of such rows can
carry most of a block's output variance, so a fit that pools them measures them. The policy
(``probe.rows`` in the config) leaves them out of the fit and of its held-out score; the probe
fits all rows beside it, so the effect stays visible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from pillm.settings import ProbeRowsConfig

RowMask = Callable[[Tensor], Tensor]  # token ids (B, T) -> bool (B, T), True: a row of the fit


def describe(policy: ProbeRowsConfig) -> str:
    """A short plain-text name of the policy: 'special+pos0', 'pos0,-1', 'all rows'."""
    parts = ["special"] if policy.exclude_special else []
    if policy.exclude_positions:
        parts.append("pos" + ",".join(str(p) for p in policy.exclude_positions))
    return "+".join(parts) or "all rows"


def row_mask(policy: ProbeRowsConfig, special_ids: Iterable[int]) -> RowMask | None:
    """The policy as a function of a batch's token ids; None when it keeps every row."""
    special = sorted(set(special_ids)) if policy.exclude_special else []
    positions = tuple(policy.exclude_positions)
    if not special and not positions:
        return None
    table = torch.tensor(special, dtype=torch.long)

    def keep(ids: Tensor) -> Tensor:
        if ids.ndim != 2:
            raise ValueError(f"row mask: expected token ids (batch, positions), got {ids.shape}")
        t = ids.shape[1]
        mask = (
            ~torch.isin(ids, table.to(ids.device))
            if special
            else torch.ones_like(ids, dtype=torch.bool)
        )
        for p in positions:
            if not -t <= p < t:
                raise ValueError(
                    f"probe.rows.exclude_positions: position {p} lies outside windows of {t} "
                    "tokens (probe.seq_len); use positions in [-seq_len, seq_len)"
                )
            mask[:, p] = False
        return mask

    return keep
