"""Zero-shot swaps: a block's FFN replaced by its fitted linear map or a low-rank truncation.

``swap_ffns`` puts replacements in place for the ``with`` block; ``record_block_outputs`` and
``replay_below`` let a swap at block i reuse the intact model's output of block i-1 instead of
recomputing the blocks below it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from pillm.probe.capture import _LAYOUT, _block_list, _blocks, _get, _set

_F64 = torch.float64


def linear_replacement(W: Tensor, dtype: torch.dtype = torch.float32) -> nn.Linear:
    """nn.Linear computing x @ W[:-1] + W[-1] for W of shape (d_in + 1, d_out)."""
    d_in, d_out = W.shape[0] - 1, W.shape[1]
    lin = nn.Linear(d_in, d_out, device=W.device, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(W[:-1].T)
        lin.bias.copy_(W[-1])
    return lin


def default_low_rank(d_in: int, d_out: int, factor: int = 8) -> int:
    """Rank giving ~``factor``x fewer weights than the dense d_in x d_out map (at least 1)."""
    return max(1, d_in * d_out // (factor * (d_in + d_out)))


def low_rank_params(d_in: int, d_out: int, rank: int) -> int:
    """Weights of ``low_rank_replacement`` at ``rank`` (its ``num_params()``, without the SVD)."""
    if not 1 <= rank <= min(d_in, d_out):
        raise ValueError(f"rank must be in [1, {min(d_in, d_out)}], got {rank}")
    return rank * (d_in + d_out) + d_out


class LowRankLinear(nn.Module):
    """x -> up(down(x)): rank-k factorisation with k (d_in + d_out) + d_out parameters."""

    def __init__(self, down: nn.Linear, up: nn.Linear):
        super().__init__()
        self.down, self.up = down, up

    def forward(self, x: Tensor) -> Tensor:
        return self.up(self.down(x))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def low_rank_replacement(
    W: Tensor, rank: int | None = None, dtype: torch.dtype = torch.float32
) -> LowRankLinear:
    """Best rank-k (Eckart-Young) approximation of the linear part of W, bias kept exact.

    Default k = ``default_low_rank(d_in, d_out)`` (about 8x fewer weights than the dense map).
    """
    d_in, d_out = W.shape[0] - 1, W.shape[1]
    k = default_low_rank(d_in, d_out) if rank is None else rank
    if not 1 <= k <= min(d_in, d_out):
        raise ValueError(f"rank must be in [1, {min(d_in, d_out)}], got {k}")
    u, s, vh = torch.linalg.svd(W[:-1].to(_F64), full_matrices=False)
    root = s[:k].sqrt()  # split S evenly so both factors have comparable norms
    down = nn.Linear(d_in, k, bias=False, device=W.device, dtype=dtype)
    up = nn.Linear(k, d_out, device=W.device, dtype=dtype)
    with torch.no_grad():
        down.weight.copy_((u[:, :k] * root).T)
        up.weight.copy_((root.unsqueeze(1) * vh[:k]).T)
        up.bias.copy_(W[-1])
    return LowRankLinear(down, up)


@contextlib.contextmanager
def swap_ffns(model: nn.Module, replacements: Mapping[int, nn.Module]) -> Iterator[nn.Module]:
    """Temporarily make ``replacements[i]`` block i's FFN (maps (..., d) -> (..., d)).

    BERT: ``intermediate`` becomes the replacement and ``output.dense`` an Identity, so dropout,
    residual and LayerNorm still follow. Originals are restored (same objects) in ``finally``.
    """
    family, blocks = _blocks(model)
    _, first, second = _LAYOUT[family]
    if bad := [i for i in replacements if not 0 <= i < len(blocks)]:
        raise IndexError(f"layers {bad} out of range for {len(blocks)} blocks")
    saved: list[tuple[nn.Module, str, nn.Module | None]] = []
    try:
        for i, repl in replacements.items():
            block = blocks[i]
            saved.append((block, first, _get(block, first)))
            _set(block, first, repl)
            if second != first:
                saved.append((block, second, _get(block, second)))
                _set(block, second, nn.Identity())
        yield model
    finally:
        for block, path, original in reversed(saved):
            _set(block, path, original)


# ---------------------------------------------------------------- swaps without the intact prefix


@contextlib.contextmanager
def record_block_outputs(model: nn.Module) -> Iterator[list[list[object]]]:
    """Every block's output, one entry per forward call, for the forwards run inside (per
    block: a list in call order). The hooks are removed on exit."""
    _, blocks = _blocks(model)
    recorded: list[list[object]] = [[] for _ in blocks]
    handles = [
        block.register_forward_hook(lambda _m, _a, out, i=i: recorded[i].append(out))
        for i, block in enumerate(blocks)
    ]
    try:
        yield recorded
    finally:
        for h in handles:
            h.remove()


def _copy(out: object) -> object:
    """A block output (a tensor, or a tuple holding tensors) with fresh tensors: a block that
    adds to its input in place must not change the recording it replays from."""
    if isinstance(out, Tensor):
        return out.clone()
    if type(out) is tuple:
        return tuple(_copy(o) for o in out)
    return out


class _Replay(nn.Module):
    """Stands in for a block below a swapped one: returns the intact model's recorded output of
    the block just below the swap, one per forward call, and computes nothing (whatever it is
    given: the blocks it replaces are skipped)."""

    def __init__(self, outputs: Sequence[object]):
        super().__init__()
        self.outputs, self.calls = outputs, 0

    def forward(self, *args, **kwargs) -> object:
        if self.calls >= len(self.outputs):
            raise RuntimeError(f"replayed block called {self.calls + 1} times, recorded "
                               f"{len(self.outputs)} forwards")  # fmt: skip
        self.calls += 1
        return _copy(self.outputs[self.calls - 1])


@contextlib.contextmanager
def replay_below(
    model: nn.Module, layer: int, outputs: Sequence[object] | None
) -> Iterator[nn.Module]:
    """Temporarily skip blocks 0 .. layer-1: each forward takes block layer-1's recorded output
    (``outputs``, from ``record_block_outputs`` over the same inputs in the same order) as the
    input of block ``layer``. A swap at ``layer`` leaves the blocks below it as they were, so
    the model computes exactly what a whole forward would (the same bits) at the cost of the
    blocks from ``layer`` on. Raises if the forwards inside do not use every recorded output
    once. ``layer`` 0 (or ``outputs`` None) skips nothing."""
    if layer == 0 or outputs is None:
        yield model
        return
    _, blocks = _block_list(model)
    saved = [blocks[i] for i in range(layer)]
    stand_ins = [_Replay(outputs) for _ in range(layer)]
    try:
        for i, stand_in in enumerate(stand_ins):
            blocks[i] = stand_in
        yield model
        if any(s.calls != len(outputs) for s in stand_ins):
            raise RuntimeError(f"replay below block {layer}: the forwards used "
                               f"{[s.calls for s in stand_ins]} of {len(outputs)} recorded "
                               "outputs (run the same batches as the recording)")  # fmt: skip
    finally:
        for i, original in enumerate(saved):
            blocks[i] = original
