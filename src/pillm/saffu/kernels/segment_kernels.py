"""SAFFU's Triton programs, launched by ``pillm.saffu.kernels.segment_sum`` and
``pillm.saffu.kernels.softmax_loss``; imported only where they run (a CUDA device, or CPU tensors
under the Triton interpreter), so a CPU job never imports Triton.

Contract shared by every kernel: matrices of ``V`` columns are contiguous row-major float32, a
row's columns are covered by ``ceil(V / BV)`` programs of ``BV`` columns each (the grid's second
axis), and every sum adds its terms one after another in a fixed order, without atomics: a rerun
on the same device gives the same bits."""

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
def adamw_rows_kernel(g_ptr, rows_ptr, vals_ptr, start_ptr, end_ptr, part_ptr, pstart_ptr,
                      pend_ptr, w_ptr, m_ptr, v_ptr, V, decay, beta1, beta2, eps, step_size,
                      bc2_sqrt, BV: tl.constexpr):  # fmt: skip
    """Program (input i, column block): the gradient of row i of w, Σ vals[e] · g[rows[e], cols]
    over entries start[i]..end[i] in their order (as ``weighted_rows_kernel``), then the
    partial rows pstart[i]..pend[i] of ``part`` in chunk order (an input has one range or the
    other, the other empty), then torch's AdamW update of that row with its moments m and v,
    in place."""
    pid, pv = tl.program_id(0), tl.program_id(1)
    cols = pv * BV + tl.arange(0, BV)
    start = tl.load(start_ptr + pid)
    end = tl.load(end_ptr + pid)
    pstart = tl.load(pstart_ptr + pid)
    pend = tl.load(pend_ptr + pid)
    mask = cols < V
    # the row's weights and moments first: their loads are in flight while the gradient adds up
    at = pid.to(tl.int64) * V + cols
    w = tl.load(w_ptr + at, mask=mask, other=0.0)
    m = tl.load(m_ptr + at, mask=mask, other=0.0)
    v = tl.load(v_ptr + at, mask=mask, other=0.0)
    grad = tl.zeros([BV], tl.float32)
    for e in range(start, end):
        row = tl.load(rows_ptr + e).to(tl.int64)
        grad += tl.load(vals_ptr + e) * tl.load(g_ptr + row * V + cols, mask=mask, other=0.0)
    part = part_ptr + pstart.to(tl.int64) * V + cols
    for _ in range(pstart, pend):  # the partial rows in order: a weight of 1, exactly an add
        grad += tl.load(part, mask=mask, other=0.0)
        part += V
    w = w * decay
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    w -= step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
    tl.store(w_ptr + at, w, mask=mask)
    tl.store(m_ptr + at, m, mask=mask)
    tl.store(v_ptr + at, v, mask=mask)


@triton.jit
def softmax_stats_kernel(w_ptr, idx_ptr, vals_ptr, y_ptr, logits_ptr, max_ptr, sum_ptr, arg_ptr,
                         target_ptr, V, K, NB, BV: tl.constexpr, WRITE_LOGITS: tl.constexpr):  # fmt: skip
    """Program (row b, column block): the block's logits Σ_j vals[b, j] · w[idx[b, j], cols] (the
    k terms in their order, as ``weighted_rows_kernel``), stored only with WRITE_LOGITS; then
    the block's max, Σ exp(logit - max), the first column of the max, and the target's logit
    where the block holds the target."""
    b, pv = tl.program_id(0), tl.program_id(1)
    cols = pv * BV + tl.arange(0, BV)
    cmask = cols < V
    acc = tl.zeros([BV], tl.float32)
    for e in range(b * K, b * K + K):
        row = tl.load(idx_ptr + e).to(tl.int64)
        acc += tl.load(vals_ptr + e) * tl.load(w_ptr + row * V + cols, mask=cmask, other=0.0)
    if WRITE_LOGITS:
        tl.store(logits_ptr + b.to(tl.int64) * V + cols, acc, mask=cmask)
    x = tl.where(cmask, acc, float("-inf"))
    top = tl.max(x, axis=0)
    at = b * NB + pv
    tl.store(max_ptr + at, top)
    tl.store(sum_ptr + at, tl.sum(tl.exp(x - top), axis=0))
    tl.store(arg_ptr + at, pv * BV + tl.argmax(x, axis=0, tie_break_left=True))
    y = tl.load(y_ptr + b)
    tl.store(target_ptr + b, tl.sum(tl.where(cols == y, acc, 0.0), axis=0), mask=y // BV == pv)


@triton.jit
def softmax_grad_kernel(logits_ptr, lse_ptr, y_ptr, V, scale, BV: tl.constexpr):
    """Program (row b, column block), in place: logits[b] -> scale · (softmax(logits[b]) -
    onehot(y[b])), the softmax as exp(logit - logsumexp[b])."""
    b, pv = tl.program_id(0), tl.program_id(1)
    cols = pv * BV + tl.arange(0, BV)
    cmask = cols < V
    at = b.to(tl.int64) * V + cols
    p = tl.exp(tl.load(logits_ptr + at, mask=cmask, other=0.0) - tl.load(lse_ptr + b))
    hit = tl.where(cols == tl.load(y_ptr + b), 1.0, 0.0)
    tl.store(logits_ptr + at, (p - hit) * scale, mask=cmask)
