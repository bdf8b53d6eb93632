"""Output layer + cross-entropy as Triton kernels: the (tokens x vocab) logits never reach memory.

``fused_linear_cross_entropy(h, w, y)`` equals ``F.cross_entropy(h @ w.T, y)`` (mean over rows)
for a small model width (the paper's d = 256, vocabulary 50,304), where the logits, not the
FLOPs, cost the time: at d = 256 each bf16 logit carries only 512 FLOPs, so writing it, reading
it for the softmax and again for its gradient costs about as much as computing it. Three
kernels, each recomputing the logits of its tiles from ``h`` and ``w`` on chip:

- ``_grad_h_kernel`` (FlashAttention's forward with queries ``h`` and keys = values = ``w``): per
  block of ``BM`` rows and one slice of the vocabulary, the logits tile by tile with an online
  maximum ``m`` and sum of exponentials ``s`` and, rescaled as ``m`` grows, the accumulator
  ``Σ_v exp(l_v - m) w_v``: one pass gives the log-sum-exp and ``dL/dh = (softmax w - w_y) / N``;
  slices (more programs for a small batch) are merged afterwards in float32;
- ``_grad_w_kernel``: per block of ``BN`` vocabulary rows, ``dL/dw = Gᵀ h`` over all rows, with
  ``G = (softmax - onehot) / N`` recomputed from the saved log-sum-exp (row slices merged
  afterwards when the vocabulary alone gives too few programs);
- ``_lse_kernel``: the log-sum-exp pass alone, when no gradient is needed.

Four logits-sized matmuls with gradients (the dense head: three, plus the logits and their
gradient through memory several times), no (tokens x vocab) buffer at all. As ``linear_ce`` does, both gradients are computed in the forward when they are needed (the loss
is the step's last operation) and the backward only scales them by the incoming gradient. The
matmuls run in the compute dtype (bf16 on CUDA) with float32 accumulation; softmax statistics are
float32, as the dense head's ``logits.float()`` (its logits are rounded to bf16 first, these are
not). ``pillm::fused_linear_ce`` is a ``torch.library`` custom op, so ``torch.compile`` treats
it as one opaque call and CUDA-graph capture records its launches. Without Triton (or on a CPU
tensor outside the Triton interpreter) the op computes the same values with ``linear_ce``.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch

from pillm.lm.linear_ce import loss_and_grads

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without Triton: the op computes with linear_ce
    triton = None


@dataclass(frozen=True)
class Blocks:
    """Tile sizes and warps of the three kernels (rows x vocabulary; the width is one tile)."""

    lse_m: int = 128  # _lse_kernel: rows, vocabulary tile, warps
    lse_n: int = 128
    lse_warps: int = 8
    dx_m: int = 128  # _grad_h_kernel
    dx_n: int = 64
    dx_warps: int = 8
    dw_m: int = 64  # _grad_w_kernel: rows per step, vocabulary rows per program
    dw_n: int = 128
    dw_warps: int = 8
    stages: int = 2  # software pipelining of the streamed tiles
    programs_per_sm: int = 2  # slices are added until the grid has this many programs per SM

    @classmethod
    def parse(cls, text: str) -> Blocks:
        """'dx_m=64,dx_warps=4' -> Blocks with those fields changed (benchmarks, tuning)."""
        fields = {}
        for item in filter(None, text.split(",")):
            key, _, value = item.partition("=")
            if key not in cls.__dataclass_fields__ or not value.isdigit():
                raise ValueError(f"fused CE blocks {text!r}: expected key=int pairs of "
                                 f"{', '.join(cls.__dataclass_fields__)}")  # fmt: skip
            fields[key] = int(value)
        return cls(**fields)


BLOCKS = Blocks.parse(os.environ.get("PILLM_FUSED_CE_BLOCKS", ""))


def triton_available() -> bool:
    return triton is not None


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (the kernels then run on CPU tensors, for tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def uses_kernels(device: torch.device) -> bool:
    """Whether the op runs the Triton kernels on tensors of this device."""
    return triton is not None and (device.type == "cuda" or interpreting())


if triton is not None:

    @triton.jit
    def _mm(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        """a @ b, float32 accumulation; UPCAST (interpreter only: its bf16 dot is wrong) first
        widens bf16 operands to float32, which multiplies the same bf16 values exactly."""
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        return tl.dot(a, b, input_precision=PRECISION)

    @triton.jit
    def _lse_kernel(x_ptr, w_ptr, t_ptr, m_ptr, s_ptr, tgt_ptr, N, V, D, v_per_split,
                    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                    PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
        pid_m, pid_s = tl.program_id(0), tl.program_id(1)
        rows = pid_m * BM + tl.arange(0, BM)
        dims = tl.arange(0, BD)
        rmask, dmask = rows < N, dims < D
        x = tl.load(x_ptr + rows[:, None] * D + dims[None, :],
                    mask=rmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
        t = tl.load(t_ptr + rows, mask=rmask, other=-1)
        m = tl.full([BM], float("-inf"), tl.float32)
        s = tl.zeros([BM], tl.float32)
        tgt = tl.zeros([BM], tl.float32)
        v_lo = pid_s * v_per_split
        v_hi = tl.minimum(v_lo + v_per_split, V)
        for v0 in range(v_lo, v_hi, BN):
            cols = v0 + tl.arange(0, BN)
            cmask = cols < v_hi
            w = tl.load(w_ptr + cols[:, None] * D + dims[None, :],
                        mask=cmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
            logits = _mm(x, tl.trans(w), PRECISION, UPCAST)
            logits = tl.where(cmask[None, :], logits, float("-inf"))
            m_new = tl.maximum(m, tl.max(logits, 1))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(logits - m_new[:, None]), 1)
            m = m_new
            tgt += tl.sum(tl.where(cols[None, :] == t[:, None], logits, 0.0), 1)
        out = pid_s * N + rows
        tl.store(m_ptr + out, m, mask=rmask)
        tl.store(s_ptr + out, s, mask=rmask)
        tl.store(tgt_ptr + out, tgt, mask=rmask)

    @triton.jit
    def _grad_h_kernel(x_ptr, w_ptr, t_ptr, m_ptr, s_ptr, tgt_ptr, acc_ptr, N, V, D, v_per_split,
                       BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                       PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
        pid_m, pid_s = tl.program_id(0), tl.program_id(1)
        rows = pid_m * BM + tl.arange(0, BM)
        dims = tl.arange(0, BD)
        rmask, dmask = rows < N, dims < D
        x = tl.load(x_ptr + rows[:, None] * D + dims[None, :],
                    mask=rmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
        t = tl.load(t_ptr + rows, mask=rmask, other=-1)
        m = tl.full([BM], float("-inf"), tl.float32)
        s = tl.zeros([BM], tl.float32)
        tgt = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, BD], tl.float32)
        v_lo = pid_s * v_per_split
        v_hi = tl.minimum(v_lo + v_per_split, V)
        for v0 in range(v_lo, v_hi, BN):
            cols = v0 + tl.arange(0, BN)
            cmask = cols < v_hi
            w = tl.load(w_ptr + cols[:, None] * D + dims[None, :],
                        mask=cmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
            logits = _mm(x, tl.trans(w), PRECISION, UPCAST)
            logits = tl.where(cmask[None, :], logits, float("-inf"))
            m_new = tl.maximum(m, tl.max(logits, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(logits - m_new[:, None])  # 0 in masked columns
            s = s * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + _mm(p.to(w.dtype), w, PRECISION, UPCAST)
            m = m_new
            tgt += tl.sum(tl.where(cols[None, :] == t[:, None], logits, 0.0), 1)
        out = pid_s * N + rows
        tl.store(m_ptr + out, m, mask=rmask)
        tl.store(s_ptr + out, s, mask=rmask)
        tl.store(tgt_ptr + out, tgt, mask=rmask)
        tl.store(acc_ptr + out[:, None] * D + dims[None, :], acc,
                 mask=rmask[:, None] & dmask[None, :])  # fmt: skip

    @triton.jit
    def _grad_w_kernel(x_ptr, w_ptr, t_ptr, lse_ptr, dw_ptr, N, V, D, n_per_split, scale,
                   BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                   PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
        pid_v, pid_s = tl.program_id(0), tl.program_id(1)
        cols = pid_v * BN + tl.arange(0, BN)
        dims = tl.arange(0, BD)
        cmask, dmask = cols < V, dims < D
        w = tl.load(w_ptr + cols[:, None] * D + dims[None, :],
                    mask=cmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
        acc = tl.zeros([BN, BD], tl.float32)
        n_lo = pid_s * n_per_split
        n_hi = tl.minimum(n_lo + n_per_split, N)
        for m0 in range(n_lo, n_hi, BM):
            rows = m0 + tl.arange(0, BM)
            rmask = rows < n_hi
            x = tl.load(x_ptr + rows[:, None] * D + dims[None, :],
                        mask=rmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
            t = tl.load(t_ptr + rows, mask=rmask, other=-1)
            lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
            logits = _mm(w, tl.trans(x), PRECISION, UPCAST)  # (BN, BM): transposed
            p = tl.exp(logits - lse[None, :])
            g = tl.where(cols[:, None] == t[None, :], p - 1.0, p) * scale
            g = tl.where(cmask[:, None] & rmask[None, :], g, 0.0)
            acc += _mm(g.to(x.dtype), x, PRECISION, UPCAST)
        tl.store(dw_ptr + (pid_s * V + cols[:, None]) * D + dims[None, :], acc,
                 mask=cmask[:, None] & dmask[None, :])  # fmt: skip


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2  # the interpreter: a few slices, so tests cover the merge


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _slices(blocks_along: int, length: int, tile: int, sms: int, per_sm: int) -> tuple[int, int]:
    """(slices, length per slice): enough programs for ``per_sm`` per SM, whole tiles each."""
    want = _cdiv(per_sm * sms, blocks_along)
    slices = max(1, min(want, _cdiv(length, tile)))
    per = _cdiv(_cdiv(length, slices), tile) * tile
    return _cdiv(length, per), per


def _kernels(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, with_grad: bool, b: Blocks):
    """(loss, dh, dw) by the kernels; ``h``, ``w`` in the compute dtype, contiguous."""
    n, d = h.shape
    v = w.shape[0]
    bd = max(16, triton.next_power_of_2(d))
    precision = "ieee" if h.dtype == torch.float32 else None  # float32: exact, as the tests ask
    sms = _sm_count(h.device)
    interp = interpreting()
    f32 = {"dtype": torch.float32, "device": h.device}

    def buffer(*shape: int) -> torch.Tensor:
        if math.prod(shape) >= 2**31 or max(n, v) * d >= 2**31:
            raise ValueError(f"fused CE: {n} rows x {v} classes x width {d} overflow the "
                             "kernels' 32-bit offsets: use train.output_layer: chunked")  # fmt: skip
        return torch.empty(shape, **f32)

    def launch(kernel, grid, *args, BM, BN, warps):  # noqa: N803 - Triton's block names
        opts = {} if interp else {"num_warps": warps, "num_stages": b.stages}
        kernel[grid](*args, BM=BM, BN=BN, BD=bd, PRECISION=precision, UPCAST=interp, **opts)

    bm, bn = (b.dx_m, b.dx_n) if with_grad else (b.lse_m, b.lse_n)
    split, per = _slices(_cdiv(n, bm), v, bn, sms, b.programs_per_sm)
    m, s, tgt = (buffer(split, n) for _ in range(3))
    if with_grad:
        acc = buffer(split, n, d)
        launch(_grad_h_kernel, (_cdiv(n, bm), split), h, w, t, m, s, tgt, acc, n, v, d, per,
               BM=bm, BN=bn, warps=b.dx_warps)  # fmt: skip
    else:
        launch(_lse_kernel, (_cdiv(n, bm), split), h, w, t, m, s, tgt, n, v, d, per,
               BM=bm, BN=bn, warps=b.lse_warps)  # fmt: skip
    top = m.max(0).values
    scale = torch.exp(m - top)  # (slices, N): each slice's statistics to the common maximum
    total = (s * scale).sum(0)
    lse = top + torch.log(total)
    loss = (lse - tgt.sum(0)).sum() / n
    if not with_grad:
        return loss, h.new_empty(0, **f32), w.new_empty(0, **f32)
    acc = (acc * scale[..., None]).sum(0) if split > 1 else acc[0]
    dh = (acc / total[:, None] - w[t].float()) / n  # (softmax w - w_y) / N

    split, per = _slices(_cdiv(v, b.dw_n), n, b.dw_m, sms, b.programs_per_sm)
    dw = buffer(split, v, d)
    launch(_grad_w_kernel, (_cdiv(v, b.dw_n), split), h, w, t, lse, dw, n, v, d, per, 1.0 / n,
           BM=b.dw_m, BN=b.dw_n, warps=b.dw_warps)  # fmt: skip
    return loss, dh, dw.sum(0) if split > 1 else dw[0]


def _torch(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, with_grad: bool):
    """The same (loss, dh, dw) without Triton: linear_ce's chunked head (the same formulas)."""
    loss, dh, dw = loss_and_grads(h, w, t, 4096, h.dtype, with_grad, with_grad)
    if not with_grad:
        return (
            loss.float(),
            h.new_empty(0, dtype=torch.float32),
            w.new_empty(0, dtype=torch.float32),
        )
    return loss.float(), dh.float(), dw.float()


@torch.library.custom_op("pillm::fused_linear_ce", mutates_args=())
def _fused_op(
    h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, with_grad: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss float32, dL/dh float32 (N, d), dL/dw float32 (V, d)); empty grads if not asked.

    The matmuls take ``h`` and ``w`` cast to ``dtype``."""
    hc, wc = h.to(dtype).contiguous(), w.to(dtype).contiguous()
    if uses_kernels(h.device):
        return _kernels(hc, wc, t.contiguous(), with_grad, BLOCKS)
    return _torch(hc, wc, t, with_grad)


@_fused_op.register_fake
def _(h, w, t, with_grad, dtype):
    n, d = h.shape
    if not with_grad:
        f32 = torch.float32
        return h.new_empty((), dtype=f32), h.new_empty(0, dtype=f32), w.new_empty(0, dtype=f32)
    f32 = torch.float32
    return (h.new_empty((), dtype=f32), h.new_empty((n, d), dtype=f32),
            w.new_empty(w.shape, dtype=f32))  # fmt: skip


def _setup(ctx, inputs, output):
    h, w = inputs[:2]
    _, dh, dw = output
    ctx.save_for_backward(dh, dw)
    ctx.dtypes = (h.dtype, w.dtype)


def _backward(ctx, grad_loss, _grad_dh, _grad_dw):
    dh, dw = ctx.saved_tensors
    h_dtype, w_dtype = ctx.dtypes
    g = grad_loss.float()
    return (dh * g).to(h_dtype), (dw * g).to(w_dtype), None, None, None


_fused_op.register_autograd(_backward, setup_context=_setup)


def fused_linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of ``h @ weight.T`` against ``targets`` (float32 scalar).

    ``h``: (..., d) final hidden states; ``weight``: (V, d) output layer; ``targets``: (...,)
    class ids in [0, V). ``compute_dtype``: the matmuls' input dtype (bf16 under CUDA autocast;
    default ``h.dtype``). Gradients reach ``h`` and ``weight`` in their own dtypes.
    """
    if compute_dtype is None:
        compute_dtype = h.dtype
    h2, t2 = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if h2.shape[0] != t2.shape[0]:
        raise ValueError(f"{h2.shape[0]} hidden rows but {t2.shape[0]} targets")
    if weight.shape[1] != h2.shape[1]:
        raise ValueError(
            f"hidden width {h2.shape[1]} but the output layer is {tuple(weight.shape)}"
        )
    with_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    with torch.autocast(h.device.type, enabled=False):  # dtypes are chosen explicitly here
        if with_grad:
            loss, _, _ = _fused_op(h2, weight, t2, True, compute_dtype)
        else:
            loss, _, _ = _fused_op(h2.detach(), weight.detach(), t2, False, compute_dtype)
    return loss
