"""Output layer + cross-entropy as Triton kernels: the (tokens x vocab) logits never reach memory.

Contract: ``fused_linear_cross_entropy(h, w, y)`` equals ``F.cross_entropy(h @ w.T, y)`` (mean
over rows, a float32 scalar); gradients reach ``h`` and ``w`` in their own dtypes. The matmuls
run in the compute dtype (bf16 on CUDA) with float32 accumulation; softmax statistics are
float32, as the dense head's ``logits.float()`` (its logits are rounded to bf16 first, these are
not). Without Triton (or on a CPU tensor outside the Triton interpreter), and at a width whose
tiles do not fit the device (``tiles.choose_tiles``), the op computes the same values with
``linear_ce``, saying why in one line.

Why: at a small model width (the paper's d = 256, vocabulary 50,304) the logits, not the FLOPs,
cost the time: each bf16 logit carries only 512 FLOPs, so writing it, reading it for the softmax
and again for its gradient costs about as much as computing it. Two kernels
(``fused_ce_kernels``), each recomputing the logits of its tiles from ``h`` and ``w`` on chip:

- ``softmax_pass`` (FlashAttention's forward with queries ``h`` and keys = values = ``w``): per
  block of ``BM`` rows and one slice of the vocabulary, the logits tile by tile with the sum of
  exponentials ``s = Σ_v exp(l_v - m)`` and (with gradients) the accumulator
  ``Σ_v exp(l_v - m) w_v``: one pass gives the log-sum-exp and ``dL/dh = (softmax w - w_y) / N``.
  The offset ``m`` is fixed per row from the bound ``|h| max_v |w_v|`` on its logits, so no
  running maximum is kept; a block whose bound proves too loose is redone from its maximum.
  With one slice (enough row blocks to fill the GPU) each program finishes its rows: their loss
  and ``dL/dh`` from the gathered target rows ``w_y``; slices (more programs for a small batch)
  are merged afterwards in float32 by torch operations;
- ``grad_w_kernel``: per block of ``BN`` vocabulary rows, ``dL/dw = Gᵀ h`` over all rows, with
  ``G = (softmax - onehot) / N`` recomputed from the saved log-sum-exp (row slices merged
  afterwards when the vocabulary alone gives too few programs).

With gradients that is four logits-sized matmuls (the dense head: three, plus the logits and
their gradient through memory several times) and no (tokens x vocab) buffer at all.

As ``linear_ce`` does, both gradients are computed in the forward when they are needed (the
loss is the step's last operation) and the backward only scales them by the incoming gradient.
``pillm::fused_linear_ce`` is a ``torch.library`` custom op, so ``torch.compile`` treats it as
one opaque call and CUDA-graph capture records its launches. Its speed against the other output
layers: ``benchmarks/output_layer_speed.py`` (figures in ``benchmarks/README.md``).
"""

from __future__ import annotations

import functools
import math
import os
import sys

import torch

from pillm.accel.kernels import block_width, interpreting, uses_kernels
from pillm.lm.kernels.linear_ce import loss_and_grads
from pillm.lm.kernels.tiles import Blocks, TileChoice, choose_tiles

# The tiles asked for (tiles.Blocks's defaults, fields changed by PILLM_FUSED_CE_BLOCKS); each
# call takes the tiles kernel_tiles chooses from them for its width and device.
BLOCKS = Blocks.parse(os.environ.get("PILLM_FUSED_CE_BLOCKS", ""))
TORCH_PATH = "the output layer runs as chunked torch operations"


@functools.cache
def shared_limit(device: torch.device) -> int | None:
    """Bytes of shared memory a block may use on this CUDA device (its opt-in maximum); None
    elsewhere (the Triton interpreter has no limit)."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    limit = getattr(props, "shared_memory_per_block_optin", 0)
    if not limit:  # a torch without the field: Triton's driver reads the same attribute
        from triton.runtime import driver

        limit = driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return int(limit)


_choose = functools.cache(choose_tiles)  # pure: one choice per width, dtype, device, tiles


def kernel_tiles(d: int, vocab: int, dtype: torch.dtype, device: torch.device) -> TileChoice:
    """The kernels' tiles at width ``d`` for ``vocab`` classes with ``dtype`` operands on
    ``device``, from ``BLOCKS`` (``tiles.choose_tiles``); ``blocks`` None where they cannot
    serve that width there, with the reason."""
    return _choose(d, vocab, dtype.itemsize, shared_limit(device), BLOCKS)


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2  # the interpreter: a few slices, so tests cover the merge


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _slices(blocks: int, length: int, tile: int, sms: int, waves: int) -> tuple[int, int]:
    """(slices, length per slice, a whole number of tiles): ``blocks`` programs times slices
    fill at least ``waves`` waves of one program per SM where the length allows, and among
    such counts (up to twice the least) the one whose last wave is fullest."""
    most = _cdiv(length, tile)
    least = min(most, _cdiv(waves * sms, blocks))
    best, best_fill = least, 0.0
    for n in range(least, min(most, 2 * least) + 1):
        programs = blocks * n
        fill = programs / (sms * _cdiv(programs, sms))
        if fill > best_fill + 1e-9:
            best, best_fill = n, fill
    per = _cdiv(_cdiv(length, best), tile) * tile
    return _cdiv(length, per), per


def _kernels(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, with_grad: bool, b: Blocks):
    """(loss, dh, dw) by the kernels; ``h``, ``w`` in the compute dtype, contiguous."""
    from pillm.lm.kernels import fused_ce_kernels as kernels

    n, d = h.shape
    v = w.shape[0]
    bd = block_width(d)
    f32 = {"dtype": torch.float32, "device": h.device}
    interp = interpreting()
    common = {
        "D": d, "BD": bd, "MASK_D": d != bd, "UPCAST": interp,
        "PRECISION": "ieee" if h.dtype == torch.float32 else None,  # float32: exact (tests)
    }  # fmt: skip
    sms = _sm_count(h.device)

    def buffer(*shape: int) -> torch.Tensor:
        if math.prod(shape) >= 2**31 or max(n, v) * d >= 2**31:
            raise ValueError(f"fused CE: {n} rows x {v} classes x width {d} overflow the "
                             "kernels' 32-bit offsets: use train.output_layer: chunked")  # fmt: skip
        return torch.empty(shape, **f32)

    def launch(kernel, grid, *args, warps, stages, **constexprs):
        opts = {} if interp else {"num_warps": warps, "num_stages": stages}
        kernel[grid](*args, **common, **constexprs, **opts)

    bm, bn, warps, stages = (
        (b.dx_m, b.dx_n, b.dx_warps, b.dx_stages)
        if with_grad
        else (b.lse_m, b.lse_n, b.lse_warps, b.lse_stages)
    )
    blocks = _cdiv(n, bm)
    split, per = _slices(blocks, v, bn, sms, b.waves)
    finish = split == 1  # one slice: the kernel finishes the rows (nothing to merge)
    log_n = math.log(n)  # lse + log N: exp(l - lse_n) = softmax / N (grad_w_kernel)
    if finish:
        row_loss, lse_n = buffer(n), buffer(n)
        dh = buffer(n, d) if with_grad else row_loss  # unused without gradients
        m = s = acc = row_loss  # unused
    else:
        m, s = buffer(split, n), buffer(split, n)
        acc = buffer(split, n, d) if with_grad else m  # unused without gradients
        row_loss = lse_n = dh = m  # unused
    # |h_n| max_v |w_v| bounds row n's logits: softmax_pass's exponent offsets
    w_norm = torch.linalg.vector_norm(w, dim=1, dtype=torch.float32).amax()
    bound = torch.linalg.vector_norm(h, dim=1, dtype=torch.float32) * w_norm
    launch(kernels.softmax_pass, (blocks, split), h, w, bound, m, s, acc, t, row_loss, lse_n, dh,
           n, v, per, log_n, warps=warps, stages=stages, BM=bm, BN=bn, MASK_N=n % bm != 0,
           MASK_V=v % bn != 0, GRAD=with_grad, FINISH=finish)  # fmt: skip
    if finish:
        loss = row_loss.mean()
    else:  # the slices' statistics merged in float32
        top = m.max(0).values
        scale = torch.exp(m - top)  # (slices, N): each slice's sums to the common maximum
        total = (s * scale).sum(0)
        lse = top + torch.log(total)
        w_y = w[t].float()  # the target rows: their logits, and dL/dh's -w_y / N
        loss = (lse - (h.float() * w_y).sum(1)).mean()
        lse_n = lse + log_n
        if with_grad:
            acc = (acc * scale[..., None]).sum(0)
            dh = (acc / total[:, None] - w_y) / n  # (softmax w - w_y) / N
    if not with_grad:
        return loss, h.new_empty(0, **f32), w.new_empty(0, **f32)

    blocks = _cdiv(v, b.dw_n)
    split, per = _slices(blocks, n, b.dw_m, sms, b.waves)
    dw = buffer(split, v, d)
    launch(kernels.grad_w_kernel, (blocks, split), h, w, t, lse_n, dw, n, v, per, 1.0 / n,
           warps=b.dw_warps, stages=b.dw_stages, BM=b.dw_m, BN=b.dw_n, MASK_N=n % b.dw_m != 0,
           MASK_V=v % b.dw_n != 0)  # fmt: skip
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
        choice = kernel_tiles(h.shape[1], w.shape[0], dtype, h.device)
        if choice.blocks is not None:
            _say(choice.reason, "the kernels take these tiles")
            return _kernels(hc, wc, t.contiguous(), with_grad, choice.blocks)
        _say(choice.reason, TORCH_PATH)
    elif h.device.type == "cuda":
        _say("Triton is not installed (pip install triton)", TORCH_PATH)
    return _torch(hc, wc, t, with_grad)


@functools.cache
def _say(reason: str, outcome: str) -> None:
    """One line on stderr per reason and outcome (none for an empty reason)."""
    if reason:
        print(f"fused output layer: {reason}; {outcome}", file=sys.stderr)


@_fused_op.register_fake
def _(h, w, t, with_grad, dtype):
    f32 = torch.float32
    if not with_grad:
        return h.new_empty((), dtype=f32), h.new_empty(0, dtype=f32), w.new_empty(0, dtype=f32)
    return (
        h.new_empty((), dtype=f32),
        h.new_empty(h.shape, dtype=f32),
        w.new_empty(w.shape, dtype=f32),
    )


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
