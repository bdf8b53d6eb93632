"""Output layer + cross-entropy as Triton kernels: the (tokens x vocab) logits never reach memory.

``fused_linear_cross_entropy(h, w, y)`` equals ``F.cross_entropy(h @ w.T, y)`` (mean over rows)
for a small model width (the paper's d = 256, vocabulary 50,304), where the logits, not the
FLOPs, cost the time: at d = 256 each bf16 logit carries only 512 FLOPs, so writing it, reading
it for the softmax and again for its gradient costs about as much as computing it. Three
kernels, each recomputing the logits of its tiles from ``h`` and ``w`` on chip:

- ``_lse_kernel``: per block of ``BM`` rows and one slice of the vocabulary, the logits tile by
  tile with an online maximum and sum of exponentials (the row's log-sum-exp) and the target
  logit; slices (more programs for a small batch) are merged on the host side in float32;
- ``_dx_kernel``: per block of rows, ``G = (softmax - onehot) / N`` tile by tile and
  ``dL/dh = G w`` accumulated in float32 registers (vocabulary slices summed afterwards);
- ``_dw_kernel``: per block of ``BN`` vocabulary rows, ``dL/dw = Gᵀ h`` over all rows (row
  slices summed afterwards), the same ``G`` recomputed from the saved log-sum-exp.

As ``linear_ce`` does, both gradients are computed in the forward when they are needed (the loss
is the step's last operation) and the backward only scales them by the incoming gradient. The
matmuls run in the compute dtype (bf16 on CUDA) with float32 accumulation; softmax statistics are
float32, as the dense head's ``logits.float()`` (its logits are rounded to bf16 first, these are
not). ``pillm::fused_linear_ce`` is a ``torch.library`` custom op, so ``torch.compile`` treats
it as one opaque call and CUDA-graph capture records its launches. Without Triton (or on a CPU
tensor outside the Triton interpreter) the op computes the same values with ``linear_ce``.
"""

from __future__ import annotations

import functools
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

    lse_m: int = 128
    lse_n: int = 64
    dx_m: int = 64
    dx_n: int = 64
    dw_m: int = 64
    dw_n: int = 64
    warps: int = 8
    stages: int = 3
    programs_per_sm: int = 2  # slices are added until the grid has this many programs per SM

    @classmethod
    def parse(cls, text: str) -> Blocks:
        """'dx_m=128,warps=4' -> Blocks with those fields changed (benchmarks, tuning)."""
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
            a, b = a.to(tl.float32), b.to(tl.float32)
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
    def _dx_kernel(x_ptr, w_ptr, t_ptr, lse_ptr, dx_ptr, N, V, D, v_per_split, scale,
                   BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                   PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
        pid_m, pid_s = tl.program_id(0), tl.program_id(1)
        rows = pid_m * BM + tl.arange(0, BM)
        dims = tl.arange(0, BD)
        rmask, dmask = rows < N, dims < D
        x = tl.load(x_ptr + rows[:, None] * D + dims[None, :],
                    mask=rmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
        t = tl.load(t_ptr + rows, mask=rmask, other=-1)
        lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
        acc = tl.zeros([BM, BD], tl.float32)
        v_lo = pid_s * v_per_split
        v_hi = tl.minimum(v_lo + v_per_split, V)
        for v0 in range(v_lo, v_hi, BN):
            cols = v0 + tl.arange(0, BN)
            cmask = cols < v_hi
            w = tl.load(w_ptr + cols[:, None] * D + dims[None, :],
                        mask=cmask[:, None] & dmask[None, :], other=0.0)  # fmt: skip
            logits = _mm(x, tl.trans(w), PRECISION, UPCAST)
            p = tl.exp(logits - lse[:, None])
            g = tl.where(cols[None, :] == t[:, None], p - 1.0, p) * scale
            g = tl.where(rmask[:, None] & cmask[None, :], g, 0.0)
            acc += _mm(g.to(w.dtype), w, PRECISION, UPCAST)
        tl.store(dx_ptr + (pid_s * N + rows[:, None]) * D + dims[None, :], acc,
                 mask=rmask[:, None] & dmask[None, :])  # fmt: skip

    @triton.jit
    def _dw_kernel(x_ptr, w_ptr, t_ptr, lse_ptr, dw_ptr, N, V, D, n_per_split, scale,
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
    """(loss, dh, dw) by the three kernels; ``h``, ``w`` in the compute dtype, contiguous."""
    n, d = h.shape
    v = w.shape[0]
    bd = max(16, triton.next_power_of_2(d))
    precision = "ieee" if h.dtype == torch.float32 else "tf32"  # tf32: unused for bf16 inputs
    sms = _sm_count(h.device)
    opts = {"num_warps": b.warps, "num_stages": b.stages} if not interpreting() else {}
    f32 = {"dtype": torch.float32, "device": h.device}

    split, per = _slices(_cdiv(n, b.lse_m), v, b.lse_n, sms, b.programs_per_sm)
    m, s, tgt = (torch.empty((split, n), **f32) for _ in range(3))
    _lse_kernel[(_cdiv(n, b.lse_m), split)](h, w, t, m, s, tgt, n, v, d, per,
                                            BM=b.lse_m, BN=b.lse_n, BD=bd,
                                            PRECISION=precision, UPCAST=interpreting(), **opts)  # fmt: skip
    top = m.max(0).values
    lse = top + torch.log((s * torch.exp(m - top)).sum(0))
    loss = (lse - tgt.sum(0)).sum() / n
    if not with_grad:
        return loss, h.new_empty(0, dtype=torch.float32), w.new_empty(0, dtype=torch.float32)
    scale = 1.0 / n

    split, per = _slices(_cdiv(n, b.dx_m), v, b.dx_n, sms, b.programs_per_sm)
    dx = torch.empty((split, n, d), **f32)
    _dx_kernel[(_cdiv(n, b.dx_m), split)](h, w, t, lse, dx, n, v, d, per, scale,
                                          BM=b.dx_m, BN=b.dx_n, BD=bd,
                                          PRECISION=precision, UPCAST=interpreting(), **opts)  # fmt: skip
    split, per = _slices(_cdiv(v, b.dw_n), n, b.dw_m, sms, b.programs_per_sm)
    dw = torch.empty((split, v, d), **f32)
    _dw_kernel[(_cdiv(v, b.dw_n), split)](h, w, t, lse, dw, n, v, d, per, scale,
                                          BM=b.dw_m, BN=b.dw_n, BD=bd,
                                          PRECISION=precision, UPCAST=interpreting(), **opts)  # fmt: skip
    return loss, dx.sum(0) if dx.shape[0] > 1 else dx[0], dw.sum(0) if dw.shape[0] > 1 else dw[0]


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
