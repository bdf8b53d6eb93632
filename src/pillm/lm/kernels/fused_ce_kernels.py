"""The Triton kernels of the fused output layer (``pillm.lm.kernels.fused_ce`` launches them).

Contract, for row-major operands ``x`` (N, D) rows and ``w`` (V, D) output layer, both in the
compute dtype, statistics and accumulators in float32, ``l = x wᵀ`` the logits (never stored):

- ``softmax_pass``, per block of rows and slice of the vocabulary: the rows' exponent offset
  ``m`` and ``s = Σ exp(l - m)`` (with GRAD also ``Σ exp(l - m) w``); with FINISH (one slice)
  the rows' loss, ``lse + log N`` and (GRAD) ``dL/dx`` instead;
- ``grad_w_kernel``, per block of vocabulary rows and slice of the rows: that slice's share of
  ``dL/dw = Gᵀ x``, ``G = softmax / N - onehot / N`` recomputed from ``lse + log N``.

Imported only where they run (a CUDA device or the Triton interpreter), so a CPU job does not
pay for importing Triton.
"""

import triton
import triton.language as tl

# exp(l - m) as exp2(l log2(e) - m log2(e)): one fused multiply-add an entry, where tl.exp
# subtracts, then multiplies by log2(e) itself before the same exp2 instruction
LOG2E = tl.constexpr(1.4426950408889634)
# softmax_pass takes each row's exponents from m = |x|·max|w_v| - HEADROOM, a bound on every
# logit (Cauchy-Schwarz) less a margin, instead of a running maximum: exp(l - m) <= e^48, so
# neither the exponentials (also in bf16), their sum over up to 10^11 classes nor, at the
# paper's vocabulary, Σ exp(l - m) w for weights below 10^12 overflow float32 (3.4e38).
# FLOOR: a row whose sum stays below it (its largest logit more than 50 below m, the bound
# loose by more than 98) would have lost terms to underflow, so its block is redone from the
# rows' largest logits.
HEADROOM = tl.constexpr(48.0)
FLOOR = tl.constexpr(1.9e-22)  # e^-50: terms that underflow are below e^-37 of the sum


@triton.jit
def _mm(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b in float32; UPCAST (interpreter only: its bf16 dot is wrong) first widens
    bf16 operands to float32, which multiplies the same bf16 values exactly."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _load(ptr, idx, dims, imask, dmask, D: tl.constexpr, MASK_I: tl.constexpr,
          MASK_D: tl.constexpr):  # fmt: skip
    """Rows ``idx`` of a row-major (·, D) matrix; masks only where a tile can be ragged."""
    ptrs = ptr + idx[:, None] * D + dims[None, :]
    if MASK_I:
        if MASK_D:
            tile = tl.load(ptrs, mask=imask[:, None] & dmask[None, :], other=0.0)
        else:
            tile = tl.load(ptrs, mask=imask[:, None], other=0.0)
    else:  # noqa: PLR5501 - Triton's constexpr branches, one load each
        if MASK_D:  # noqa: SIM108
            tile = tl.load(ptrs, mask=dmask[None, :], other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def _softmax_tile(x, w_ptr, v0, v_hi, dims, dmask, m, s, acc,
                  D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, MASKED: tl.constexpr,
                  MASK_D: tl.constexpr, GRAD: tl.constexpr, MAXIMUM: tl.constexpr,
                  PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """One vocabulary tile of ``softmax_pass``: (m, s, acc) updated with the fixed offset m.
    MASKED: the slice's ragged last tile (columns from v_hi on are not classes). MAXIMUM: only
    m raised to the rows' largest logits (a loose block's first sweep)."""
    cols = v0 + tl.arange(0, BN)
    cmask = cols < v_hi
    w = _load(w_ptr, cols, dims, cmask, dmask, D, MASKED, MASK_D)
    logits = _mm(x, tl.trans(w), tl.zeros([BM, BN], tl.float32), PRECISION, UPCAST)
    if MASKED:
        logits = tl.where(cmask[None, :], logits, float("-inf"))
    if MAXIMUM:
        m = tl.maximum(m, tl.max(logits, 1))
    else:
        p = tl.exp2(logits * LOG2E - (m * LOG2E)[:, None])  # exp(l - m); 0 in masked columns
        s += tl.sum(p, 1)
        if GRAD:
            acc = _mm(p.to(w.dtype), w, acc, PRECISION, UPCAST)
    return m, s, acc


@triton.jit
def _slice_sums(x, w_ptr, v_lo, v_hi, dims, dmask, m, s, acc,
                D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, MASK_V: tl.constexpr,
                MASK_D: tl.constexpr, GRAD: tl.constexpr, MAXIMUM: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """(m, s, acc) over the classes [v_lo, v_hi), tile by tile (``_softmax_tile``): whole
    tiles unmasked; MASK_V (V not a multiple of BN): the one ragged tile after them."""
    v_full = v_lo + (v_hi - v_lo) // BN * BN
    for v0 in range(v_lo, v_full, BN):
        m, s, acc = _softmax_tile(x, w_ptr, v0, v_hi, dims, dmask, m, s, acc, D, BM, BN, False,
                                  MASK_D, GRAD, MAXIMUM, PRECISION, UPCAST)  # fmt: skip
    if MASK_V:  # noqa: SIM102 - a compile-time branch around a run-time one
        if v_full < v_hi:
            m, s, acc = _softmax_tile(x, w_ptr, v_full, v_hi, dims, dmask, m, s, acc, D, BM, BN,
                                      True, MASK_D, GRAD, MAXIMUM, PRECISION, UPCAST)  # fmt: skip
    return m, s, acc


@triton.jit
def softmax_pass(x_ptr, w_ptr, bound_ptr, m_ptr, s_ptr, acc_ptr, t_ptr, loss_ptr, lse_ptr, dh_ptr,
                 N, V, v_per_split, log_n,
                 D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                 MASK_N: tl.constexpr, MASK_V: tl.constexpr, MASK_D: tl.constexpr,
                 GRAD: tl.constexpr, FINISH: tl.constexpr, PRECISION: tl.constexpr,
                 UPCAST: tl.constexpr):  # fmt: skip
    """Rows' offset m and Σ exp(l - m) over one vocabulary slice; GRAD: also Σ exp(l - m) w.

    m is the rows' logit bound (``bound_ptr``: |x_n| max_v |w_v|) less HEADROOM, so a tile
    costs what ``grad_w_kernel``'s does: no running maximum, no block-wide test whether to
    rescale (with them this pass is slower than ``grad_w_kernel``, the same matmuls). A block
    with a row below FLOOR (a loose bound) is redone from its rows' largest logits, found by a
    sweep of the logits alone; either way m is the offset stored. The redo keeps no running
    maximum beside dL/dh's accumulator: such code slows the pass on the usual rows even where
    it never runs (``benchmarks/output_layer_speed.py`` times the output layer: its README).

    FINISH (one slice holds the whole vocabulary): no merge is needed, so the program finishes
    its rows itself instead of storing (m, s, acc): each row's loss lse - x·w_y, lse + log N
    (``grad_w_kernel``'s input) and, with GRAD, dL/dx = (Σ softmax w - w_y) / N, which torch
    operations after the kernel would otherwise compute."""
    pid_m, pid_s = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    dims = tl.arange(0, BD)
    rmask, dmask = rows < N, dims < D
    x = _load(x_ptr, rows, dims, rmask, dmask, D, MASK_N, MASK_D)
    v_lo = pid_s * v_per_split
    v_hi = tl.minimum(v_lo + v_per_split, V)
    if MASK_N:  # noqa: SIM108 - a compile-time branch, one load each
        m = tl.load(bound_ptr + rows, mask=rmask, other=0.0) - HEADROOM
    else:
        m = tl.load(bound_ptr + rows) - HEADROOM
    s = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BD], tl.float32)
    m, s, acc = _slice_sums(x, w_ptr, v_lo, v_hi, dims, dmask, m, s, acc, D, BM, BN, MASK_V,
                            MASK_D, GRAD, False, PRECISION, UPCAST)  # fmt: skip
    if tl.min(s, 0) < FLOOR:  # a loose bound: the rows' largest logits, then the sums from them
        m = tl.full([BM], float("-inf"), tl.float32)
        m, s, acc = _slice_sums(x, w_ptr, v_lo, v_hi, dims, dmask, m, s, acc, D, BM, BN, MASK_V,
                                MASK_D, False, True, PRECISION, UPCAST)  # fmt: skip
        s = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, BD], tl.float32)
        m, s, acc = _slice_sums(x, w_ptr, v_lo, v_hi, dims, dmask, m, s, acc, D, BM, BN, MASK_V,
                                MASK_D, GRAD, False, PRECISION, UPCAST)  # fmt: skip
    if FINISH:
        lse = m + tl.log(s)
        tl.store(lse_ptr + rows, lse + log_n, mask=rmask)
        if GRAD:  # Σ softmax w / N first: acc's registers are free for what follows
            scale = 1.0 / (s * N)  # one division a row, not one an entry (and no spills)
            tl.store(dh_ptr + rows[:, None] * D + dims[None, :], acc * scale[:, None],
                     mask=rmask[:, None] & dmask[None, :])  # fmt: skip
            tl.debug_barrier()  # these stores are visible to all the block's threads below
        if MASK_N:  # noqa: SIM108 - a compile-time branch, one load each
            t = tl.load(t_ptr + rows, mask=rmask, other=0)
        else:
            t = tl.load(t_ptr + rows)
        # x·w_y and dL/dx -= w_y / N, a quarter of the width at a time (x re-read from L2):
        # whole or half-width float32 tiles of x and w_y beside acc spill registers
        target = tl.zeros([BM], tl.float32)
        for part in tl.static_range(4):
            cols = part * (BD // 4) + tl.arange(0, BD // 4)
            cmask = cols < D
            xh = _load(x_ptr, rows, cols, rmask, cmask, D, MASK_N, MASK_D).to(tl.float32)
            wh = _load(w_ptr, t, cols, rmask, cmask, D, MASK_N, MASK_D).to(tl.float32)
            target += tl.sum(xh * wh, 1)
            if GRAD:
                ptrs = dh_ptr + rows[:, None] * D + cols[None, :]
                mask = rmask[:, None] & cmask[None, :]
                tl.store(ptrs, tl.load(ptrs, mask=mask) - wh / N, mask=mask)
        tl.store(loss_ptr + rows, lse - target, mask=rmask)
    else:
        out = pid_s * N + rows
        tl.store(m_ptr + out, m, mask=rmask)
        tl.store(s_ptr + out, s, mask=rmask)
        if GRAD:
            tl.store(acc_ptr + out[:, None] * D + dims[None, :], acc,
                     mask=rmask[:, None] & dmask[None, :])  # fmt: skip


@triton.jit
def grad_w_kernel(x_ptr, w_ptr, t_ptr, lse_ptr, dw_ptr, N, V, n_per_split, scale,
                  D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                  MASK_N: tl.constexpr, MASK_V: tl.constexpr, MASK_D: tl.constexpr,
                  PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """dL/dw of one block of vocabulary rows over one slice of the rows: Σ Gᵀ x with
    G = exp(l - lse_n) - onehot / N, ``lse_ptr`` holding lse + log N (the mean's 1/N folded
    in). Rows past N load as zeros and add nothing; vocabulary rows past V are not stored."""
    pid_v, pid_s = tl.program_id(0), tl.program_id(1)
    cols = pid_v * BN + tl.arange(0, BN)
    dims = tl.arange(0, BD)
    cmask, dmask = cols < V, dims < D
    w = _load(w_ptr, cols, dims, cmask, dmask, D, MASK_V, MASK_D)
    acc = tl.zeros([BN, BD], tl.float32)
    n_lo = pid_s * n_per_split
    n_hi = tl.minimum(n_lo + n_per_split, N)
    for m0 in range(n_lo, n_hi, BM):
        rows = m0 + tl.arange(0, BM)
        rmask = rows < n_hi
        x = _load(x_ptr, rows, dims, rmask, dmask, D, MASK_N, MASK_D)
        if MASK_N:
            t = tl.load(t_ptr + rows, mask=rmask, other=-1)
            lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
        else:
            t = tl.load(t_ptr + rows)
            lse = tl.load(lse_ptr + rows)
        logits = _mm(w, tl.trans(x), tl.zeros([BN, BM], tl.float32), PRECISION, UPCAST)
        p = tl.exp2(logits * LOG2E - (lse * LOG2E)[None, :])  # softmax / N, transposed: (BN, BM)
        # int32 ids (V < 2^31, as every offset here): one compare an entry, not two (int64)
        g = tl.where(cols[:, None] == t.to(tl.int32)[None, :], p - scale, p)
        acc = _mm(g.to(x.dtype), x, acc, PRECISION, UPCAST)
    tl.store(dw_ptr + (pid_s * V + cols[:, None]) * D + dims[None, :], acc,
             mask=cmask[:, None] & dmask[None, :])  # fmt: skip
