"""Triton kernels of causal self-attention over one short context (``pillm.models.attention``).

One program per (sequence, head) holds the whole context (T <= 128): the scores of every query
with every key fit on chip, so the softmax needs no running maximum, and the backward adds each
key block's gradients in registers: no atomics, no float32 dq buffer, no second pass. The keys
are taken in four blocks of BT / 4, because Philox draws four random numbers at a time
(``tl.rand4x``): number i of a draw is the dropout coin of key block i, so each block's coins
arrive in the layout of its scores, with no reshuffling of registers.

Operands are read straight from the (B, T, 3C) output of the qkv projection and written to the
(B, T, C) input of the output projection (head h: columns h·HD ... of each third), so no
transpose or copy surrounds the kernels. Exponents are base 2 (scores scaled by log2(e)); the
saved log-sum-exp is in that unit too.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _mm(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b in float32; UPCAST (interpreter only: its bf16 dot is wrong) first widens
    bf16 operands to float32, which multiplies the same bf16 values exactly."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _rows(base, first, T, dims, STRIDE: tl.constexpr, N: tl.constexpr):
    """Rows first .. first + N - 1 of a head's (T, HD) slice, zeros past T."""
    rows = first + tl.arange(0, N)
    return tl.load(base + rows[:, None] * STRIDE + dims[None, :], mask=(rows < T)[:, None],
                   other=0.0)  # fmt: skip


@triton.jit
def _scores(q, k, rows, first, scale, BT: tl.constexpr, KB: tl.constexpr,
            PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """Scaled scores (base 2) of every query with keys first .. first + KB - 1; -inf above the
    diagonal (a query's later keys; that also hides keys past T from every real query)."""
    s = _mm(q, tl.trans(k), tl.zeros([BT, KB], tl.float32), PRECISION, UPCAST)
    keys = first + tl.arange(0, KB)
    return tl.where(keys[None, :] <= rows[:, None], s * scale, float("-inf"))


@triton.jit
def _coins(seed_ptr, pid, p_drop, BT: tl.constexpr, KB: tl.constexpr):
    """The kept entries of one (sequence, head) as 4 bits an entry of key block 0: bit i keeps
    query r's key i·KB + c. One Philox draw per 4 entries; the forward and backward draw the
    same numbers from the same seed and counters."""
    counters = (pid * BT + tl.arange(0, BT)[:, None]) * KB + tl.arange(0, KB)[None, :]
    u0, u1, u2, u3 = tl.rand4x(tl.load(seed_ptr), counters)
    return ((u0 >= p_drop).to(tl.int32) | ((u1 >= p_drop).to(tl.int32) << 1)
            | ((u2 >= p_drop).to(tl.int32) << 2) | ((u3 >= p_drop).to(tl.int32) << 3))  # fmt: skip


@triton.jit
def attention_forward(qkv_ptr, y_ptr, lse_ptr, seed_ptr, T, H, scale, p_drop,
                      C: tl.constexpr, HD: tl.constexpr, BT: tl.constexpr,
                      DROPOUT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """y = softmax(q kᵀ / sqrt(HD), causal) v (dropout on the probabilities) for one (sequence,
    head); lse: each query's log2-sum-exp2 of its scaled scores (for the backward)."""
    KB: tl.constexpr = BT // 4
    b, h = tl.program_id(0), tl.program_id(1)
    base = qkv_ptr + b * T * 3 * C + h * HD
    dims = tl.arange(0, HD)
    rows = tl.arange(0, BT)
    scale = scale * LOG2E
    q = _rows(base, 0, T, dims, 3 * C, BT)
    kb = base + C
    s0 = _scores(q, _rows(kb, 0, T, dims, 3 * C, KB), rows, 0, scale, BT, KB, PRECISION, UPCAST)
    s1 = _scores(q, _rows(kb, KB, T, dims, 3 * C, KB), rows, KB, scale, BT, KB, PRECISION, UPCAST)
    s2 = _scores(q, _rows(kb, 2 * KB, T, dims, 3 * C, KB), rows, 2 * KB, scale, BT, KB, PRECISION,
                 UPCAST)  # fmt: skip
    s3 = _scores(q, _rows(kb, 3 * KB, T, dims, 3 * C, KB), rows, 3 * KB, scale, BT, KB, PRECISION,
                 UPCAST)  # fmt: skip
    m = tl.maximum(tl.maximum(tl.max(s0, 1), tl.max(s1, 1)),
                   tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))  # fmt: skip
    p0 = tl.exp2(s0 - m[:, None])
    p1 = tl.exp2(s1 - m[:, None])
    p2 = tl.exp2(s2 - m[:, None])
    p3 = tl.exp2(s3 - m[:, None])
    total = tl.sum(p0, 1) + tl.sum(p1, 1) + tl.sum(p2, 1) + tl.sum(p3, 1)
    if DROPOUT:
        keep = _coins(seed_ptr, b * H + h, p_drop, BT, KB)
        p0 = tl.where((keep & 1) != 0, p0, 0.0)
        p1 = tl.where((keep & 2) != 0, p1, 0.0)
        p2 = tl.where((keep & 4) != 0, p2, 0.0)
        p3 = tl.where((keep & 8) != 0, p3, 0.0)
        norm = total * (1.0 - p_drop)
    else:
        norm = total
    vbase = base + 2 * C
    dt = q.dtype
    o = tl.zeros([BT, HD], tl.float32)
    o = _mm(p0.to(dt), _rows(vbase, 0, T, dims, 3 * C, KB), o, PRECISION, UPCAST)
    o = _mm(p1.to(dt), _rows(vbase, KB, T, dims, 3 * C, KB), o, PRECISION, UPCAST)
    o = _mm(p2.to(dt), _rows(vbase, 2 * KB, T, dims, 3 * C, KB), o, PRECISION, UPCAST)
    o = _mm(p3.to(dt), _rows(vbase, 3 * KB, T, dims, 3 * C, KB), o, PRECISION, UPCAST)
    o = o / norm[:, None]
    valid = rows < T
    tl.store(y_ptr + (b * T + rows[:, None]) * C + h * HD + dims[None, :], o.to(dt),
             mask=valid[:, None])  # fmt: skip
    tl.store(lse_ptr + (b * H + h) * T + rows, m + tl.log2(total), mask=valid)


@triton.jit
def _key_block_grads(q, do, dq, lse, delta, keep, rows, base, dbase, first, T, dims, scale,
                     inv_keep, BIT: tl.constexpr, C: tl.constexpr, HD: tl.constexpr,
                     BT: tl.constexpr, KB: tl.constexpr, DROPOUT: tl.constexpr,
                     PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """One key block's dk and dv, stored; returns dq plus its share (unscaled)."""
    k = _rows(base + C, first, T, dims, 3 * C, KB)
    v = _rows(base + 2 * C, first, T, dims, 3 * C, KB)
    p = tl.exp2(_scores(q, k, rows, first, scale, BT, KB, PRECISION, UPCAST) - lse[:, None])
    dp = _mm(do, tl.trans(v), tl.zeros([BT, KB], tl.float32), PRECISION, UPCAST)
    if DROPOUT:
        kept = (keep & BIT) != 0
        pd = tl.where(kept, p * inv_keep, 0.0)
        dp = tl.where(kept, dp * inv_keep, 0.0)
    else:
        pd = p
    dt = q.dtype
    ds = p * (dp - delta[:, None])  # dL/d(scores), the softmax's Jacobian applied
    dv = _mm(tl.trans(pd.to(dt)), do, tl.zeros([KB, HD], tl.float32), PRECISION, UPCAST)
    dk = _mm(tl.trans(ds.to(dt)), q, tl.zeros([KB, HD], tl.float32), PRECISION, UPCAST)
    keys = first + tl.arange(0, KB)
    where = keys[:, None] * (3 * C) + dims[None, :]
    mask = (keys < T)[:, None]
    tl.store(dbase + C + where, (dk * (scale / LOG2E)).to(dt), mask=mask)
    tl.store(dbase + 2 * C + where, dv.to(dt), mask=mask)
    return _mm(ds.to(dt), k, dq, PRECISION, UPCAST)


@triton.jit
def attention_backward(qkv_ptr, y_ptr, dy_ptr, lse_ptr, seed_ptr, dqkv_ptr, T, H, scale, p_drop,
                       C: tl.constexpr, HD: tl.constexpr, BT: tl.constexpr,
                       DROPOUT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """dq, dk, dv of one (sequence, head) into the (B, T, 3C) gradient of qkv."""
    KB: tl.constexpr = BT // 4
    b, h = tl.program_id(0), tl.program_id(1)
    base = qkv_ptr + b * T * 3 * C + h * HD
    dbase = dqkv_ptr + b * T * 3 * C + h * HD
    dims = tl.arange(0, HD)
    rows = tl.arange(0, BT)
    valid = rows < T
    scale = scale * LOG2E
    q = _rows(base, 0, T, dims, 3 * C, BT)
    out = (b * T + rows[:, None]) * C + h * HD + dims[None, :]
    do = tl.load(dy_ptr + out, mask=valid[:, None], other=0.0)
    y = tl.load(y_ptr + out, mask=valid[:, None], other=0.0)
    delta = tl.sum(do.to(tl.float32) * y.to(tl.float32), 1)  # rowsum(dO ∘ O) = rowsum(P ∘ dP)
    lse = tl.load(lse_ptr + (b * H + h) * T + rows, mask=valid, other=0.0)
    if DROPOUT:
        keep = _coins(seed_ptr, b * H + h, p_drop, BT, KB)
        inv_keep = 1.0 / (1.0 - p_drop)
    else:
        keep = 0
        inv_keep = 1.0
    dq = tl.zeros([BT, HD], tl.float32)
    dq = _key_block_grads(q, do, dq, lse, delta, keep, rows, base, dbase, 0, T, dims, scale,
                          inv_keep, 1, C, HD, BT, KB, DROPOUT, PRECISION, UPCAST)  # fmt: skip
    dq = _key_block_grads(q, do, dq, lse, delta, keep, rows, base, dbase, KB, T, dims, scale,
                          inv_keep, 2, C, HD, BT, KB, DROPOUT, PRECISION, UPCAST)  # fmt: skip
    dq = _key_block_grads(q, do, dq, lse, delta, keep, rows, base, dbase, 2 * KB, T, dims, scale,
                          inv_keep, 4, C, HD, BT, KB, DROPOUT, PRECISION, UPCAST)  # fmt: skip
    dq = _key_block_grads(q, do, dq, lse, delta, keep, rows, base, dbase, 3 * KB, T, dims, scale,
                          inv_keep, 8, C, HD, BT, KB, DROPOUT, PRECISION, UPCAST)  # fmt: skip
    tl.store(dbase + rows[:, None] * (3 * C) + dims[None, :], (dq * (scale / LOG2E)).to(q.dtype),
             mask=valid[:, None])  # fmt: skip
