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

import torch
from torch import Tensor

from pillm.core.kernels import uses_kernels

CHUNK = 256  # entries a program adds at most
BLOCK_V = 1024  # columns a program covers


def chunk_table(crow: Tensor, chunk: int) -> tuple[Tensor, ...]:
    """From CSR offsets (n_in + 1): (start, end, dest) of the inputs written in one chunk,
    (start, end) of the chunks of longer inputs (their partial rows are numbered in order),
    and (first, last, dest) of those inputs' partial rows for the merge."""
    lengths = crow[1:] - crow[:-1]
    n_chunks = torch.clamp((lengths + chunk - 1) // chunk, min=1)
    multi = n_chunks > 1
    one = (~multi).nonzero().squeeze(1)
    long = multi.nonzero().squeeze(1)
    counts = n_chunks[long]
    seg = torch.repeat_interleave(long, counts)
    first = torch.cumsum(counts, 0) - counts
    j = torch.arange(seg.numel(), device=crow.device) - torch.repeat_interleave(first, counts)
    c_start = crow[seg] + j * chunk
    c_end = torch.minimum(c_start + chunk, crow[seg + 1])
    return crow[one], crow[one + 1], one, c_start, c_end, first, first + counts, long


def segment_weight_grad(
    idx: Tensor, wts: Tensor, grad: Tensor, n_in: int, chunk: int = CHUNK
) -> Tensor:
    """``X^T G`` (n_in, V) in float32, summed in a fixed order (see the module docstring)."""
    if not uses_kernels(grad.device):
        from pillm.saffu.model import bag_weight_grad

        return bag_weight_grad(idx, wts, grad, n_in)
    from pillm.saffu.segment_kernels import weighted_rows_kernel

    b, k = idx.shape
    v = grad.shape[1]
    g = grad.float().contiguous()
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    rows, vals = order // k, wts.flatten()[order].float().contiguous()
    crow = torch.zeros(n_in + 1, dtype=torch.long, device=idx.device)
    crow[1:] = torch.bincount(flat, minlength=n_in).cumsum(0)
    o_start, o_end, o_dest, c_start, c_end, m_first, m_last, m_dest = chunk_table(crow, chunk)
    out = torch.empty(n_in, v, dtype=torch.float32, device=grad.device)
    blocks = -(-v // BLOCK_V)
    if o_start.numel():
        weighted_rows_kernel[(o_start.numel(), blocks)](
            g, rows, vals, o_start, o_end, o_dest, out, v, BV=BLOCK_V
        )
    if c_start.numel():
        partial = torch.empty(c_start.numel(), v, dtype=torch.float32, device=grad.device)
        slots = torch.arange(c_start.numel(), device=grad.device)
        weighted_rows_kernel[(c_start.numel(), blocks)](
            g, rows, vals, c_start, c_end, slots, partial, v, BV=BLOCK_V
        )
        ones = torch.ones(c_start.numel(), dtype=torch.float32, device=grad.device)
        weighted_rows_kernel[(m_first.numel(), blocks)](
            partial, slots, ones, m_first, m_last, m_dest, out, v, BV=BLOCK_V
        )
    return out
