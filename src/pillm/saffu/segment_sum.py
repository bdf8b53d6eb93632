"""SAFFU's weight gradient ``X^T G`` on CUDA as a fixed-order sum: one Triton kernel, no atomics.

``X`` (B, n_in) has ``k`` non-zeros a row (``idx``, ``wts``), ``G`` (B, V) is the logits'
gradient. Row i of ``X^T G`` adds ``w_e · G[b_e]`` over the entries e with input i. The entries
are sorted by input (a stable sort, so equal inputs keep their row order) and each input's
entries are added one after another by one program per block of columns: the order never
changes, so a rerun gives the same bits. cuSPARSE's product of the transposed rows did not
(up to 1.8e-5 apart on an H100), and ``embedding_bag``'s sorted backward, which does, took 5.05
ms against cuSPARSE's 2.28 at the paper's shape. With this kernel a SAFFU step at batch 1,024
took 5.47 ms against 6.54 with cuSPARSE (one H100, benchmarks/saffu_step.py;
benchmarks/gpu_runs/2026-11-27_strict_builds).

Frequent inputs (the "other" type) collect thousands of entries; so that no program walks them
all, an input's entries are cut into chunks of at most ``chunk``: an input with one chunk is
written straight to its row, longer ones to partial rows that a second launch of the same
kernel adds in chunk order. Without Triton (or on a CPU tensor outside the interpreter) the
same values come from ``embedding_bag``'s backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pillm.core.kernels import uses_kernels

CHUNK = 256  # entries a program adds at most
BLOCK_V = 1024  # columns a program covers


def by_input(idx: Tensor, wts: Tensor, n_in: int) -> tuple[Tensor, Tensor, Tensor]:
    """The rows' entries sorted by input, as CSR of the transpose: offsets (n_in + 1), each
    entry's row and weight. The sort is stable, so an input's entries keep their row order."""
    k = idx.shape[1]
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    crow = torch.zeros(n_in + 1, dtype=flat.dtype, device=idx.device)
    crow[1:] = torch.bincount(flat, minlength=n_in).cumsum(0)
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
    (exclusive) into row ``dest[c]`` of its output."""

    start: Tensor
    end: Tensor
    dest: Tensor

    def __len__(self) -> int:
        return self.start.numel()


def chunk_table(crow: Tensor, chunk: int) -> tuple[Chunks, Chunks, Chunks]:
    """From CSR offsets (n_in + 1): ``direct``, the inputs of at most ``chunk`` entries (an
    empty one writes a zero row), into the gradient; ``parts``, the chunks of the longer
    inputs, into partial rows numbered in order; ``merge``, per longer input, the range of its
    partial rows, into the gradient."""
    lengths = crow[1:] - crow[:-1]
    n_chunks = torch.clamp((lengths + chunk - 1) // chunk, min=1)
    multi = n_chunks > 1
    one = (~multi).nonzero().squeeze(1)
    long = multi.nonzero().squeeze(1)
    counts = n_chunks[long]
    seg = torch.repeat_interleave(long, counts)
    first = torch.cumsum(counts, 0) - counts
    j = torch.arange(seg.numel(), device=crow.device) - torch.repeat_interleave(first, counts)
    part_start = crow[seg] + j * chunk
    part_end = torch.minimum(part_start + chunk, crow[seg + 1])
    slots = torch.arange(seg.numel(), device=crow.device)
    return (
        Chunks(crow[one], crow[one + 1], one),
        Chunks(part_start, part_end, slots),
        Chunks(first, first + counts, long),
    )


def _launch(src: Tensor, rows: Tensor, vals: Tensor, chunks: Chunks, out: Tensor) -> None:
    """out[dest] = Σ vals[e] · src[rows[e]] over each chunk's entries, all columns."""
    from pillm.saffu.segment_kernels import weighted_rows_kernel

    if len(chunks):
        v = src.shape[1]
        weighted_rows_kernel[(len(chunks), -(-v // BLOCK_V))](
            src, rows, vals, chunks.start, chunks.end, chunks.dest, out, v, BV=BLOCK_V
        )


def segment_weight_grad(
    idx: Tensor, wts: Tensor, grad: Tensor, n_in: int, chunk: int = CHUNK
) -> Tensor:
    """``X^T G`` (n_in, V) in float32, summed in a fixed order (see the module docstring)."""
    if not uses_kernels(grad.device):
        return bag_weight_grad(idx, wts, grad, n_in)
    g = grad.float().contiguous()
    crow, rows, vals = by_input(idx, wts, n_in)
    vals = vals.float().contiguous()
    direct, parts, merge = chunk_table(crow, chunk)
    out = torch.empty(n_in, g.shape[1], dtype=torch.float32, device=g.device)
    _launch(g, rows, vals, direct, out)
    if len(parts):
        partial = torch.empty(len(parts), g.shape[1], dtype=torch.float32, device=g.device)
        _launch(g, rows, vals, parts, partial)
        ones = torch.ones(len(parts), dtype=torch.float32, device=g.device)
        _launch(partial, parts.dest, ones, merge, out)  # the partial rows in chunk order
    return out
