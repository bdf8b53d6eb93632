"""The noise of the generative fits: an endless stream of (x0 ~ N(0, I), u ~ U(0, 1)) rows.

The noise of row i comes from a generator keyed by (seed, stream, i // BLOCK), never from the
chunk it lands in: any chunk size gives the same rows, hence a PIL fit the same Gram statistics
and weights up to float64 summation order. Each use draws its own stream of ``seed``: flow
matching's training pairs 0, held-out pairs 1, samples 2 and AdamW batches 3; diffusion's
samples 4, AdamW batches 6, bucket b's training and held-out pairs 10 + 2b and 11 + 2b, and the
sampler's noise at step t stream -1 - t.
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 1024  # rows per noise block: the unit of the chunk-independent random stream


def block_seed(seed: int, stream: int, block: int) -> int:
    return (seed * 1_000_003 + stream * 998_244_353 + block * 2_654_435_761) % (2**63 - 1)


def noise_rows(
    seed: int, stream: int, start: int, stop: int, dim: int, device: torch.device | str
) -> tuple[Tensor, Tensor]:
    """Rows [start, stop) of an endless (x0 ~ N(0, I_dim), u ~ U(0, 1)) stream, on ``device``.

    Row i depends only on (seed, stream, i): each BLOCK of rows has its own generator, and a
    block is always drawn whole, so how rows are chunked never changes their values.
    """
    xs, us = [], []
    for b in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        g = torch.Generator(device=device).manual_seed(block_seed(seed, stream, b))
        x0 = torch.randn(BLOCK, dim, generator=g, device=device)
        u = torch.rand(BLOCK, generator=g, device=device)
        lo, hi = max(start - b * BLOCK, 0), min(stop - b * BLOCK, BLOCK)
        xs.append(x0[lo:hi])
        us.append(u[lo:hi])
    return torch.cat(xs), torch.cat(us)
