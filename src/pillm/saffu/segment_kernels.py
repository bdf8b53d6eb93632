"""The Triton kernel of ``pillm.saffu.segment_sum`` (imported only where it runs: a CUDA
device or the Triton interpreter)."""

import triton
import triton.language as tl


@triton.jit
def weighted_rows_kernel(g_ptr, rows_ptr, vals_ptr, start_ptr, end_ptr, dest_ptr, out_ptr, V,
                         BV: tl.constexpr, SKIP_EMPTY: tl.constexpr):  # fmt: skip
    """Program (chunk c, column block): out[dest[c], cols] = Σ_{e in start[c]..end[c]} vals[e]
    · g[rows[e], cols], the entries added one after another in their order (no atomics: a
    rerun gives the same bits). An empty chunk writes zeros, or with SKIP_EMPTY nothing."""
    pid, pv = tl.program_id(0), tl.program_id(1)
    cols = pv * BV + tl.arange(0, BV)
    start = tl.load(start_ptr + pid)
    end = tl.load(end_ptr + pid)
    cmask = cols < V
    smask = cmask  # where this program stores
    if SKIP_EMPTY:
        smask = cols < tl.where(end > start, V, 0)
    acc = tl.zeros([BV], tl.float32)
    for e in range(start, end):
        row = tl.load(rows_ptr + e).to(tl.int64)
        acc += tl.load(vals_ptr + e) * tl.load(g_ptr + row * V + cols, mask=cmask, other=0.0)
    dest = tl.load(dest_ptr + pid).to(tl.int64)
    tl.store(out_ptr + dest * V + cols, acc, mask=smask)


@triton.jit
def adamw_rows_kernel(g_ptr, rows_ptr, vals_ptr, start_ptr, end_ptr, dest_ptr, active_ptr,
                      w_ptr, m_ptr, v_ptr, V, decay, beta1, beta2, eps, step_size, bc2_sqrt,
                      BV: tl.constexpr):  # fmt: skip
    """Program (input c, column block): the gradient of row dest[c], Σ vals[e] · g[rows[e], cols]
    over entries start[c]..end[c] in their order (as ``weighted_rows_kernel``), then torch's
    AdamW update of that row of w with its moments m and v, in place; a program whose
    ``active`` is 0 loads and stores nothing (another launch owns its row)."""
    pid, pv = tl.program_id(0), tl.program_id(1)
    cols = pv * BV + tl.arange(0, BV)
    start = tl.load(start_ptr + pid)
    end = tl.load(end_ptr + pid)
    cmask = cols < V
    mask = cols < tl.where(tl.load(active_ptr + pid) != 0, V, 0)
    # the row's weights and moments first: their loads are in flight while the gradient adds up
    at = tl.load(dest_ptr + pid).to(tl.int64) * V + cols
    w = tl.load(w_ptr + at, mask=mask, other=0.0)
    m = tl.load(m_ptr + at, mask=mask, other=0.0)
    v = tl.load(v_ptr + at, mask=mask, other=0.0)
    grad = tl.zeros([BV], tl.float32)
    for e in range(start, end):
        row = tl.load(rows_ptr + e).to(tl.int64)
        grad += tl.load(vals_ptr + e) * tl.load(g_ptr + row * V + cols, mask=cmask, other=0.0)
    w = w * decay
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    w -= step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
    tl.store(w_ptr + at, w, mask=mask)
    tl.store(m_ptr + at, m, mask=mask)
    tl.store(v_ptr + at, v, mask=mask)
