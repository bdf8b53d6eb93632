"""Causal self-attention of the GPT blocks, from the qkv projection's output to the output
projection's input.

``causal_attention(qkv, n_head, dropout_p)`` equals the nanoGPT form: q, k, v split from the
(B, T, 3C) projection into heads, ``F.scaled_dot_product_attention(q, k, v, dropout_p,
is_causal=True)``, the heads merged back into (B, T, C). Where the Triton kernels run (a CUDA
tensor, or the Triton interpreter in tests) and the context is short (T <= 128, the paper's
context; a head width of 16 to 128, a power of two), ``pillm.models.attention_kernels`` computes
it with one program per (sequence, head) holding the whole context; elsewhere (CPU jobs, longer
contexts) it is exactly that SDPA call, so CPU results do not change.

Why: at the paper's shape (T = 128, 4 heads of 64) PyTorch's fused kernels are built for long
contexts: cuDNN's backward runs three kernels (a preprocessing pass, the gradients with dq in
float32, its conversion), and the heads are transposed and copied on both sides. Here each
(sequence, head) is one tile: no running softmax maximum, dq summed in registers over four key
blocks, operands read from and written to the projections' own layouts; and, with no atomics,
every rerun gives the same bits (deterministic training needs no slower variant).

Dropout: the kernels draw their coins with Philox (``tl.rand4x``) from a seed drawn per call by
``torch.randint`` on the device (so a replayed CUDA graph draws new ones), the backward redraws
the same. The coins differ from PyTorch's (another generator), as any two dropout
implementations' do; the expected output and its gradient are the same.

``pillm::causal_attention`` and its backward are ``torch.library`` custom ops: ``torch.compile``
treats each as one opaque call and CUDA-graph capture records its launch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pillm.core.kernels import interpreting, uses_kernels

MAX_CONTEXT = 128  # one tile of queries x keys per program


def kernels_apply(qkv: torch.Tensor, n_head: int) -> bool:
    """Whether the Triton kernels compute this call (else the SDPA path)."""
    b, t, c3 = qkv.shape
    hd = c3 // 3 // n_head
    return (
        uses_kernels(qkv.device)
        and qkv.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and t <= MAX_CONTEXT
        and 16 <= hd <= 128
        and hd & (hd - 1) == 0
        and b * n_head * MAX_CONTEXT * MAX_CONTEXT < 2**31  # the coins' 32-bit counters
    )


def _block(t: int) -> int:
    """The query and key tile: a power of two >= T, at least 64 (four key blocks of >= 16)."""
    return max(64, 1 << (t - 1).bit_length())


def _launch_options(qkv: torch.Tensor, t: int) -> dict:
    if interpreting():
        return {"PRECISION": "ieee", "UPCAST": True}
    return {
        "PRECISION": "ieee" if qkv.dtype == torch.float32 else None,  # float32: exact (tests)
        "UPCAST": False, "num_warps": 8 if _block(t) >= 128 else 4, "num_stages": 1,
    }  # fmt: skip


@torch.library.custom_op("pillm::causal_attention", mutates_args=())
def _forward_op(
    qkv: torch.Tensor, seed: torch.Tensor, n_head: int, dropout_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y (B, T, C) in qkv's dtype, log2-sum-exp2 of each query's scaled scores (B, H, T))."""
    from pillm.models import attention_kernels as kernels

    b, t, c3 = qkv.shape
    c = c3 // 3
    hd = c // n_head
    y = qkv.new_empty(b, t, c)
    lse = qkv.new_empty(b, n_head, t, dtype=torch.float32)
    kernels.attention_forward[(b, n_head)](
        qkv, y, lse, seed, t, n_head, 1.0 / math.sqrt(hd), dropout_p, C=c, HD=hd, BT=_block(t),
        DROPOUT=dropout_p > 0, **_launch_options(qkv, t),
    )  # fmt: skip
    return y, lse


@_forward_op.register_fake
def _(qkv, seed, n_head, dropout_p):
    b, t, c3 = qkv.shape
    return qkv.new_empty(b, t, c3 // 3), qkv.new_empty(b, n_head, t, dtype=torch.float32)


@torch.library.custom_op("pillm::causal_attention_backward", mutates_args=())
def _backward_op(
    dy: torch.Tensor, qkv: torch.Tensor, y: torch.Tensor, lse: torch.Tensor,
    seed: torch.Tensor, n_head: int, dropout_p: float,
) -> torch.Tensor:  # fmt: skip
    """dL/dqkv (B, T, 3C) from dL/dy."""
    from pillm.models import attention_kernels as kernels

    b, t, c3 = qkv.shape
    c = c3 // 3
    hd = c // n_head
    dqkv = torch.empty_like(qkv)
    kernels.attention_backward[(b, n_head)](
        qkv, y, dy, lse, seed, dqkv, t, n_head, 1.0 / math.sqrt(hd), dropout_p, C=c, HD=hd,
        BT=_block(t), DROPOUT=dropout_p > 0, **_launch_options(qkv, t),
    )  # fmt: skip
    return dqkv


@_backward_op.register_fake
def _(dy, qkv, y, lse, seed, n_head, dropout_p):
    return torch.empty_like(qkv)


def _setup(ctx, inputs, output):
    qkv, seed, n_head, dropout_p = inputs
    y, lse = output
    ctx.save_for_backward(qkv, y, lse, seed)
    ctx.n_head, ctx.dropout_p = n_head, dropout_p


def _backward(ctx, dy, _dlse):
    qkv, y, lse, seed = ctx.saved_tensors
    dqkv = _backward_op(dy.contiguous(), qkv, y, lse, seed, ctx.n_head, ctx.dropout_p)
    return dqkv, None, None, None


_forward_op.register_autograd(_backward, setup_context=_setup)


def sdpa_attention(qkv: torch.Tensor, n_head: int, dropout_p: float) -> torch.Tensor:
    """The nanoGPT form with PyTorch's SDPA: (B, T, 3C) -> (B, T, C)."""
    b, t, c3 = qkv.shape
    c = c3 // 3
    q, k, v = (z.view(b, t, n_head, c // n_head).transpose(1, 2) for z in qkv.split(c, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    return y.transpose(1, 2).contiguous().view(b, t, c)


def causal_attention(qkv: torch.Tensor, n_head: int, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal multi-head attention of a (B, T, 3C) qkv projection (q, k, v thirds, heads of
    C / n_head columns each) -> (B, T, C), dropout ``dropout_p`` on the probabilities."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attention dropout must be in [0, 1), got {dropout_p}")
    if not kernels_apply(qkv, n_head):
        return sdpa_attention(qkv, n_head, dropout_p)
    if dropout_p > 0:  # drawn on the device: a replayed CUDA graph draws a new seed
        seed = torch.randint(0, 2**31 - 1, (1,), device=qkv.device, dtype=torch.int64)
    else:
        seed = torch.zeros(1, device=qkv.device, dtype=torch.int64)
    y, _ = _forward_op(qkv.contiguous(), seed, n_head, float(dropout_p))
    return y
