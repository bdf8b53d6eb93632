"""SAFFU's softmax cross-entropy on CUDA, fused with its sparse forward ``X W``.

A SAFFU row's logits span the whole vocabulary (50,257 types at the paper shape), so at the
paper's batch of 1,024 they are 206 MB, and a held-out chunk of 4,096 rows 823 MB. torch's
``cross_entropy`` reads and writes a tensor of that size several times (log-softmax, its
gradient, the one-hot scatter). Here one kernel (``softmax_stats_kernel``) computes each row's
logits block by block, as ``weighted_rows`` does (the same bits), and keeps of each block only
its max, its sum of exponentials, its argmax and the target's logit; the row's logsumexp
combines the blocks in a fixed order. A held-out chunk never stores its logits; a training
step stores them once and turns them into the loss's gradient in place
(``softmax_grad_kernel``).

Contract: the rows ``X`` as in pillm.saffu.kernels.segment_sum (``idx``, ``wts``: (B, k)), the
weight (n_in, V) float32, the targets (B,) integer classes; kernels only (a CUDA device or the
Triton interpreter). Everything is summed in a fixed order, so a rerun gives the same bits; the
loss equals ``cross_entropy``'s up to float32 rounding (tests/saffu/test_saffu_cuda.py), and the
argmax is the first column of the row's largest logit, as ``argmax``'s. Its speed against torch's
``cross_entropy`` is in benchmarks/README.md ("SAFFU step and update").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pillm.saffu.kernels.segment_sum import BLOCK_V  # columns a program covers, as in weighted_rows


@dataclass(frozen=True)
class SoftmaxRows:
    """Per row: ``logsumexp`` of its logits, the ``target`` class's logit, the ``argmax``; the
    logits themselves (B, V) when they were kept."""

    logsumexp: Tensor
    target: Tensor
    argmax: Tensor
    logits: Tensor | None

    @property
    def nll(self) -> Tensor:
        """Each row's negative log-likelihood of its target (nats, float32)."""
        return self.logsumexp - self.target


def softmax_rows(
    idx: Tensor, wts: Tensor, weight: Tensor, targets: Tensor, keep_logits: bool = False,
    block_v: int = BLOCK_V,
) -> SoftmaxRows:  # fmt: skip
    """The softmax statistics of the rows ``X W`` (``idx``, ``wts``: (B, k)) against ``targets``
    (B,), without storing the logits unless ``keep_logits``."""
    from pillm.saffu.kernels.segment_kernels import softmax_stats_kernel

    b, k = idx.shape
    v = weight.shape[1]
    nb = -(-v // block_v)
    dev = weight.device
    top = torch.empty(b, nb, dtype=torch.float32, device=dev)
    sums = torch.empty_like(top)
    arg = torch.empty(b, nb, dtype=torch.int32, device=dev)
    target = torch.empty(b, dtype=torch.float32, device=dev)
    logits = torch.empty(b, v, dtype=torch.float32, device=dev) if keep_logits else top
    softmax_stats_kernel[(b, nb)](
        weight.contiguous(), idx.flatten().contiguous(), wts.flatten().float().contiguous(),
        targets.contiguous(), logits, top, sums, arg, target, v, k, nb, BV=block_v,
        WRITE_LOGITS=keep_logits,
    )  # fmt: skip
    best, block = top.max(1, keepdim=True)  # the first block of the row's max
    lse = best.squeeze(1) + (sums * torch.exp(top - best)).sum(1).log()
    argmax = arg.gather(1, block).squeeze(1).long()
    return SoftmaxRows(lse, target, argmax, logits if keep_logits else None)


def loss_and_logit_grad(
    idx: Tensor, wts: Tensor, weight: Tensor, targets: Tensor, block_v: int = BLOCK_V
) -> tuple[Tensor, Tensor]:
    """The mean cross-entropy of the rows ``X W`` against ``targets`` and its gradient with
    respect to the logits (B, V), written over the logits: what a training step needs."""
    from pillm.saffu.kernels.segment_kernels import softmax_grad_kernel

    rows = softmax_rows(idx, wts, weight, targets, keep_logits=True, block_v=block_v)
    grad = rows.logits
    b, v = grad.shape
    softmax_grad_kernel[(b, -(-v // block_v))](
        grad, rows.logsumexp.contiguous(), targets.contiguous(), v, 1.0 / b, BV=block_v
    )
    return rows.nll.mean(), grad
