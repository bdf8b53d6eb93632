"""SAFFU's sparse products on CUDA as fixed-order sums: one Triton kernel, no atomics.

Contract. ``X`` (B, n_in) has ``k`` non-zeros a row (``idx``, ``wts``: (B, k)), ``G`` (B, V) is
the logits' gradient, ``W`` (n_in, V). Results are float32, each sum added in an order fixed by
the shapes and ``idx`` alone, so a rerun gives the same bits:

- ``segment_weight_grad``: ``X^T G`` (n_in, V). Row i adds ``w_e · G[b_e]`` over the entries e
  with input i, in row order (the entries sorted by input with a stable sort).
- ``weighted_rows``: the forward ``X W`` (B, V), each row's k terms in their order.
- ``adamw_step``: torch's AdamW update of ``W`` and its moments, in place, with the gradient
  ``segment_weight_grad`` gives (the same bits at the same chunk length) summed inside the
  update and never stored: each program applies AdamW to its row of W at once, so the update is
  one launch over the inputs, and the dense gradient that the update would read back (W's size,
  823 MB at the paper shape) is neither written nor read (pillm.saffu.optim).

Without Triton (or on a CPU tensor outside the interpreter) ``segment_weight_grad`` and
``weighted_rows`` give ``embedding_bag``'s values, its backward also a fixed-order sum.

Why a kernel: cuSPARSE's product of the transposed rows does not give the same bits on a rerun
(up to 1.8e-5 apart on an H100), and ``embedding_bag``'s sorted backward, which does, is slower
at the paper's shape (benchmarks/saffu_step.py; figures in benchmarks/README.md, "SAFFU step and
update").

Chunks. Frequent inputs (the "other" type) collect thousands of entries; so that no program
walks them all, an input's entries are cut into chunks of at most ``chunk``: an input with one
chunk is written straight to its row, longer ones to partial rows that a third launch of the
same kernel adds in chunk order (in ``adamw_step``, the update's own program). Every size here
follows from the shapes, never from the data (the launches have one program per input, or per
possible chunk, and the ones with nothing to do store nothing), so a training step never waits
for the GPU (no ``nonzero``, ``repeat_interleave`` or ``bincount``): the job shares the GPU with
others under MPS, where a host wait idles it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from pillm.accel.kernels import uses_kernels

CHUNK = 256  # entries a program adds at most
BLOCK_V = 1024  # columns a program covers
# adamw_step's entries a program adds at most, columns it covers and warps: of chunks of 32 to
# 256 entries, 128 to 2,048 columns and 2 to 8 warps, among the fastest at batch 1,024 and 4,096
# (benchmarks/row_adamw.py; figures in benchmarks/README.md)
ADAMW_CHUNK, ADAMW_BLOCK_V, ADAMW_WARPS = 64, 512, 4


def by_input(idx: Tensor, wts: Tensor, n_in: int) -> tuple[Tensor, Tensor, Tensor]:
    """The rows' entries sorted by input, as CSR of the transpose: offsets (n_in + 1), each
    entry's row and weight. The sort is stable, so an input's entries keep their row order."""
    k = idx.shape[1]
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    # input i's entries start where the sorted inputs first reach i (bincount would sync)
    inputs = torch.arange(n_in + 1, dtype=flat.dtype, device=idx.device)
    crow = torch.searchsorted(flat[order], inputs)
    return crow, order // k, wts.flatten()[order]


def bag_weight_grad(idx: Tensor, wts: Tensor, grad: Tensor, n_in: int) -> Tensor:
    """``X^T G`` as ``embedding_bag``'s own backward computes it (entries sorted by input, no
    atomics): the fixed-order gradient where the kernel does not run (a CPU tensor outside the
    interpreter), and a comparison in benchmarks/saffu_step.py (on an H100 it is slower than
    the kernel)."""
    b, k = idx.shape
    flat = idx.flatten()
    offset2bag = torch.arange(b * k, device=idx.device) // k
    bag_size = torch.full((b,), k, dtype=flat.dtype, device=idx.device)
    return torch.ops.aten._embedding_bag_dense_backward(
        grad.contiguous(), flat, offset2bag, bag_size, flat.new_empty(0), n_in, False, 0,
        wts.flatten(), -1,
    )  # fmt: skip


@dataclass(frozen=True)
class Chunks:
    """Programs of ``weighted_rows_kernel``: chunk c adds entries ``start[c]`` to ``end[c]``
    (exclusive) into row ``dest[c]`` of its output; ``skip_empty``: an empty chunk stores
    nothing (otherwise it writes a zero row)."""

    start: Tensor
    end: Tensor
    dest: Tensor
    skip_empty: bool = False

    def __len__(self) -> int:
        return self.start.numel()


def max_parts(entries: int, chunk: int) -> int:
    """An upper bound on the chunks of the longer inputs: each has more than ``chunk`` entries,
    so at most entries / chunk of them, and ceil(len / chunk) < len / chunk + 1 chunks each:
    fewer than 2 entries / chunk in all."""
    return max(1, -(-2 * entries // chunk))


def chunk_table(crow: Tensor, chunk: int, parts_bound: int) -> tuple[Chunks, Chunks, Chunks]:
    """From CSR offsets (n_in + 1), tables whose sizes do not depend on the data: ``direct``,
    one program per input: an input of at most ``chunk`` entries writes its sum into the
    gradient (an empty one zeros), a longer one zeros that ``merge`` overwrites; ``parts``,
    ``parts_bound`` programs: the longer inputs' chunks in order into partial rows 0, 1, ...,
    the programs past the last chunk empty (they store nothing); ``merge``, one program per
    input: a longer input adds its range of partial rows into its gradient row, the others
    have an empty range (they store nothing)."""
    n_in = crow.numel() - 1
    lengths = crow[1:] - crow[:-1]
    n_chunks = torch.clamp((lengths + chunk - 1) // chunk, min=1)
    multi = n_chunks > 1
    counts = torch.where(multi, n_chunks, 0)  # partial rows per input
    ends = torch.cumsum(counts, 0)
    first = ends - counts
    inputs = torch.arange(n_in, device=crow.device)
    slots = torch.arange(parts_bound, device=crow.device)
    seg = torch.searchsorted(ends, slots, right=True).clamp(max=n_in - 1)  # each slot's input
    valid = slots < ends[-1]
    part_start = torch.where(valid, crow[seg] + (slots - first[seg]) * chunk, 0)
    part_end = torch.where(valid, torch.minimum(part_start + chunk, crow[seg + 1]), 0)
    return (
        Chunks(crow[:-1], torch.where(multi, crow[:-1], crow[1:]), inputs),
        Chunks(part_start, part_end, slots, skip_empty=True),
        Chunks(first, ends, inputs, skip_empty=True),
    )


def _launch(src: Tensor, rows: Tensor, vals: Tensor, chunks: Chunks, out: Tensor) -> None:
    """out[dest] = Σ vals[e] · src[rows[e]] over each chunk's entries, all columns."""
    from pillm.saffu.kernels.segment_kernels import weighted_rows_kernel

    if len(chunks):
        v = src.shape[1]
        weighted_rows_kernel[(len(chunks), -(-v // BLOCK_V))](
            src, rows, vals, chunks.start, chunks.end, chunks.dest, out, v, BV=BLOCK_V,
            SKIP_EMPTY=chunks.skip_empty,
        )  # fmt: skip


def segment_weight_grad(
    idx: Tensor, wts: Tensor, grad: Tensor, n_in: int, chunk: int = CHUNK
) -> Tensor:
    """``X^T G`` (n_in, V) in float32, summed in a fixed order (see the module docstring)."""
    if not uses_kernels(grad.device):
        return bag_weight_grad(idx, wts, grad, n_in)
    s = Segments.of(idx, wts, grad, n_in, chunk)
    out = torch.empty(n_in, s.grad.shape[1], dtype=torch.float32, device=s.grad.device)
    _launch(s.grad, s.rows, s.vals, s.direct, out)
    _launch(s.partial, s.parts.dest, s.ones, s.merge, out)  # the partial rows in chunk order
    return out


@dataclass(frozen=True)
class Segments:
    """``X^T G``'s entries sorted by input, cut into chunks (``chunk_table``), and the partial
    rows of the inputs longer than a chunk, already summed: what the gradient's last launches
    (``segment_weight_grad``'s, or ``adamw_step``'s) read."""

    grad: Tensor  # G, float32 (B, V)
    rows: Tensor  # each sorted entry's row of G
    vals: Tensor  # its weight, float32
    direct: Chunks
    parts: Chunks
    merge: Chunks
    partial: Tensor  # the long inputs' chunk sums, in chunk order
    ones: Tensor  # the merge's weights (1 per partial row)

    @classmethod
    def of(cls, idx: Tensor, wts: Tensor, grad: Tensor, n_in: int, chunk: int) -> Segments:
        g = grad.float().contiguous()
        crow, rows, vals = by_input(idx, wts, n_in)
        vals = vals.float().contiguous()
        direct, parts, merge = chunk_table(crow, chunk, max_parts(idx.numel(), chunk))
        partial = torch.empty(len(parts), g.shape[1], dtype=torch.float32, device=g.device)
        _launch(g, rows, vals, parts, partial)
        ones = torch.ones(len(parts), dtype=torch.float32, device=g.device)
        return cls(g, rows, vals, direct, parts, merge, partial, ones)


def weighted_rows(idx: Tensor, wts: Tensor, weight: Tensor) -> Tensor:
    """``X W`` (B, V): row b adds ``wts[b, j] · W[idx[b, j]]`` for j = 0..k-1 in that order, one
    program per row and block of columns (the values of ``embedding_bag`` up to float32
    summation order; a rerun gives the same bits). Without the kernel: ``embedding_bag``."""
    if not uses_kernels(weight.device):
        return torch.nn.functional.embedding_bag(idx, weight, per_sample_weights=wts, mode="sum")
    b, k = idx.shape
    w = weight.contiguous()
    rows = torch.arange(b, device=idx.device)
    chunks = Chunks(rows * k, rows * k + k, rows)
    out = torch.empty(b, w.shape[1], dtype=torch.float32, device=w.device)
    _launch(w, idx.flatten().contiguous(), wts.flatten().float().contiguous(), chunks, out)
    return out


@dataclass(frozen=True)
class AdamWScalars:
    """One AdamW step's scalars, as torch's fused AdamW computes them from lr and the step."""

    decay: float  # 1 - lr · weight_decay
    beta1: float
    beta2: float
    eps: float
    step_size: float  # lr / (1 - beta1^t)
    bc2_sqrt: float  # sqrt(1 - beta2^t)

    @classmethod
    def at(cls, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
           step: int) -> AdamWScalars:  # fmt: skip
        b1, b2 = betas
        return cls(1 - lr * weight_decay, b1, b2, eps, lr / (1 - b1**step),
                   math.sqrt(1 - b2**step))  # fmt: skip


def adamw_step(
    idx: Tensor, wts: Tensor, grad: Tensor, weight: Tensor, exp_avg: Tensor,
    exp_avg_sq: Tensor, scalars: AdamWScalars, chunk: int = ADAMW_CHUNK,
    block_v: int = ADAMW_BLOCK_V, num_warps: int = ADAMW_WARPS,
) -> None:  # fmt: skip
    """One AdamW step of ``weight`` (n_in, V) in place, its gradient ``X^T G`` summed inside
    the update in a fixed order (``segment_weight_grad``'s bits at the same ``chunk``): one
    launch, one program per input and column block; an input of at most ``chunk`` entries adds
    its entries, a longer one its partial rows (``Segments.partial``), in chunk order."""
    from pillm.saffu.kernels.segment_kernels import adamw_rows_kernel

    n_in, v = weight.shape
    s = Segments.of(idx, wts, grad, n_in, chunk)
    adamw_rows_kernel[(n_in, -(-v // block_v))](
        s.grad, s.rows, s.vals, s.direct.start, s.direct.end, s.partial, s.merge.start,
        s.merge.end, weight, exp_avg, exp_avg_sq, v, scalars.decay, scalars.beta1,
        scalars.beta2, scalars.eps, scalars.step_size, scalars.bc2_sqrt, BV=block_v,
        num_warps=num_warps,
    )  # fmt: skip
