"""The Triton kernels of ``pillm.models.embedding``'s fixed-point backward (imported only where
they run: a CUDA device or the Triton interpreter). The same arithmetic as the torch path there,
in two passes instead of about ten (each a full pass over a float64 or int64 buffer). Launched
with ``enable_fp_fusion=False``: a fused multiply-add would skip the product's rounding that
the torch path applies before it rounds to an integer."""

import triton
import triton.language as tl


@triton.jit
def _round_half_even(x):
    """torch.round of float64 values (ties to even; |x| >= 2**52 is already an integer)."""
    f = tl.floor(x)
    frac = x - f  # exact: x and its floor share an exponent range
    odd = (f - 2.0 * tl.floor(0.5 * f)) != 0.0
    up = (frac > 0.5) | ((frac == 0.5) & odd)
    return tl.where(up, f + 1.0, f)


@triton.jit
def scatter_fixed_point(grad_ptr, ids_ptr, scale_ptr, total_ptr, n,
                        D: tl.constexpr, BD: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """total[ids[r]] += round(float64(grad[r]) · scale) as int64, for ROWS rows a program.
    Integer atomics: the sums are exact, so the order they land in cannot change a bit."""
    cols = tl.arange(0, BD)
    scale = tl.load(scale_ptr)
    for k in range(ROWS):
        row = tl.program_id(0) * ROWS + k
        mask = cols < tl.where(row < n, D, 0)  # no columns past the last row
        g = tl.load(grad_ptr + row.to(tl.int64) * D + cols, mask=mask, other=0.0)
        fixed = _round_half_even(g.to(tl.float64) * scale).to(tl.int64)
        i = tl.load(ids_ptr + tl.minimum(row, n - 1)).to(tl.int64)
        tl.atomic_add(total_ptr + i * D + cols, fixed, mask=mask, sem="relaxed")


@triton.jit
def fixed_to_float(total_ptr, scale_ptr, out_ptr, size, BLOCK: tl.constexpr):
    """out = float32(float64(total) / scale), as torch computes it."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    total = tl.load(total_ptr + offs, mask=mask, other=0)
    out = total.to(tl.float64) / tl.load(scale_ptr)
    tl.store(out_ptr + offs, out.to(tl.float32), mask=mask)
