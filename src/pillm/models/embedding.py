"""A token embedding whose backward is deterministic and fast on CUDA.

PyTorch's deterministic embedding backward sorts the token ids and then adds each id's
gradient rows one after another: in natural text a frequent token repeats thousands of
times in one batch, and that serial chain cost 1.1 ms of a 10 ms training step at 32,768
tokens (one H200, ``trainer_throughput.py --profile``). Here the rows are added with
atomics, which are fast, in 64-bit fixed point, where addition is exact and so independent
of the order the atomics land in: the same batch gives the same gradient bit for bit.

Fixed point: every row is scaled by ``2**s / max|g|`` and rounded, with ``s`` leaving room
for all N rows in one sum (``N * 2**s < 2**62``). At the paper's 32,768 tokens the rounding
step is 2**-47 of the batch's largest gradient entry; entries above about 1e-5 of it keep
their float32 precision, smaller ones carry an absolute error near 1e-14 of it.

On CUDA two Triton kernels do the scaling, the atomics and the conversion back
(``pillm.models.embedding_kernels``); elsewhere torch operations do the same arithmetic.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pillm.accel.kernels import block_width, interpreting, uses_kernels


@torch.library.custom_op("pillm::embedding_grad_fixed_point", mutates_args=())
def embedding_grad(grad: torch.Tensor, ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """d(loss)/d(weight) of ``F.embedding(ids, weight)`` given ``grad`` (..., d): float32
    (num_rows, d), summed in int64 fixed point (exact, so order-independent)."""
    d = grad.shape[-1]
    rows = grad.reshape(-1, d).float()
    ids = ids.reshape(-1)
    bits = 62 - max(1, math.ceil(math.log2(max(2, ids.numel()))))
    top = rows.abs().amax().clamp_min(torch.finfo(torch.float32).tiny)
    scale = (2.0**bits) / top.double()
    # A non-finite gradient has no fixed-point value: hand NaN on, as the float sum would.
    out_scale = torch.where(top.isfinite(), scale, torch.nan)
    total = torch.zeros(num_rows, d, dtype=torch.int64, device=grad.device)
    sums = _by_kernels if uses_kernels(grad.device) else _by_torch
    return sums(rows.contiguous(), ids.contiguous(), scale, out_scale, total)


def _by_torch(rows, ids, scale, out_scale, total) -> torch.Tensor:
    """The fixed-point sums by torch operations (CPU; the kernels' reference)."""
    fixed = torch.round(rows.double() * scale).to(torch.int64)
    # Integer atomics are exact, whatever order they land in: PyTorch's deterministic mode
    # (which would sort and add serially) is not needed for this one call.
    strict = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        total.index_add_(0, ids, fixed)
    finally:
        torch.use_deterministic_algorithms(strict, warn_only=warn_only)
    return (total.double() / out_scale).float()


SCATTER_ROWS = 8  # gradient rows per program of the scatter kernel
CONVERT_BLOCK = 1024  # entries per program of the conversion kernel


def _by_kernels(rows, ids, scale, out_scale, total) -> torch.Tensor:
    """The same sums by the Triton kernels (pillm.models.embedding_kernels): one pass scales,
    rounds and adds the rows, one converts the sums, instead of about ten passes over float64
    and int64 buffers; the scales stay on the device (no host sync). Deterministic training on
    an H100: 1.9 % more tokens/s at batch 256, 7.0 % at batch 32 (benchmarks/README.md)."""
    from pillm.models import embedding_kernels as kernels

    n, d = rows.shape
    exact = {} if interpreting() else {"enable_fp_fusion": False}  # see the kernels' module
    kernels.scatter_fixed_point[(-(-n // SCATTER_ROWS),)](
        rows, ids, scale, total, n, D=d, BD=block_width(d), ROWS=SCATTER_ROWS, **exact
    )
    out = torch.empty(total.shape, dtype=torch.float32, device=total.device)
    size = total.numel()
    kernels.fixed_to_float[(-(-size // CONVERT_BLOCK),)](
        total, out_scale, out, size, BLOCK=CONVERT_BLOCK, **exact
    )
    return out


@embedding_grad.register_fake
def _(grad, ids, num_rows):
    return grad.new_empty(num_rows, grad.shape[-1], dtype=torch.float32)


class _FixedPointEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.num_rows, ctx.dtype = weight.shape[0], weight.dtype
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        return embedding_grad(grad.contiguous(), ids, ctx.num_rows).to(ctx.dtype), None


def embed(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``F.embedding(ids, weight)``; on CUDA under deterministic algorithms (training with
    ``train.deterministic``) its backward sums in fixed point (above) instead of PyTorch's
    serial deterministic kernel. Elsewhere (CPU, nondeterministic CUDA) it is F.embedding."""
    if ids.is_cuda and torch.are_deterministic_algorithms_enabled() and weight.requires_grad:
        return _FixedPointEmbedding.apply(weight, ids)
    return F.embedding(ids, weight)


class TokenEmbedding(torch.nn.Embedding):
    """``nn.Embedding`` (same parameters, state-dict keys and hooks) whose forward is ``embed``."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return embed(self.weight, ids)
