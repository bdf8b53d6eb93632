"""SAFFU's AdamW step: one training step of ``SaffuLM`` on a batch of sparse rows, at a given rate.

Two implementations of the same update (torch's AdamW: decoupled weight decay, bias-corrected
moments), chosen by where the kernels run (``adamw_for``):

- ``TorchAdamW``: autograd's weight gradient, then ``torch.optim.AdamW`` (fused on CUDA). The
  CPU path.
- ``RowAdamW``: the loss and its gradient ``G`` with respect to the logits by one fused pass
  (``pillm.saffu.kernels.softmax_loss``, no autograd); the weight gradient ``X^T G`` is summed
  inside the update, row by row, and never stored
  (``pillm.saffu.kernels.segment_sum.adamw_step``). At the paper shape W has 206 M weights, so
  the dense gradient is 823 MB written by the backward and read again by the optimizer at every
  step.

tests/saffu/test_saffu_cuda.py checks that both give the same weights and moments after several
steps (the Triton interpreter on CPU, and CUDA), and that a rerun of ``RowAdamW`` gives the same
bits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pillm.accel.kernels import uses_kernels
from pillm.core.adamw import AdamW
from pillm.saffu.kernels.segment_sum import AdamWScalars, adamw_step
from pillm.saffu.kernels.softmax_loss import loss_and_logit_grad
from pillm.saffu.model import SaffuLM

EPS = 1e-8  # torch.optim.AdamW's default, which the SAFFU runs have always used


class TorchAdamW:
    """``torch.optim.AdamW`` on the model's weight, its gradient from autograd."""

    def __init__(self, model: SaffuLM, betas: tuple[float, float], weight_decay: float):
        self.model = model
        fused = model.weight.device.type == "cuda"
        self.opt = AdamW(model.parameters(), lr=0.0, betas=betas, eps=EPS,
                                     weight_decay=weight_decay, fused=fused)  # fmt: skip

    def step(self, idx: Tensor, wts: Tensor, targets: Tensor, lr: float) -> Tensor:
        """One step at rate ``lr``; returns the batch's loss before it."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(self.model(idx, wts).float(), targets)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


class RowAdamW:
    """The same AdamW with the weight gradient summed inside the update (module docstring)."""

    def __init__(self, model: SaffuLM, betas: tuple[float, float], weight_decay: float):
        self.model, self.betas, self.weight_decay = model, betas, weight_decay
        self.exp_avg = torch.zeros_like(model.weight)
        self.exp_avg_sq = torch.zeros_like(model.weight)
        self.steps = 0

    def step(self, idx: Tensor, wts: Tensor, targets: Tensor, lr: float) -> Tensor:
        """One step at rate ``lr``; returns the batch's loss before it."""
        with torch.no_grad():
            loss, grad = loss_and_logit_grad(idx, wts, self.model.weight, targets)
        self.steps += 1
        scalars = AdamWScalars.at(lr, self.betas, EPS, self.weight_decay, self.steps)
        with torch.no_grad():
            adamw_step(idx, wts, grad, self.model.weight.data, self.exp_avg, self.exp_avg_sq,
                       scalars)  # fmt: skip
        return loss.detach()


def adamw_for(
    model: SaffuLM, betas: tuple[float, float], weight_decay: float
) -> TorchAdamW | RowAdamW:
    """``RowAdamW`` where the Triton kernels run (CUDA), ``TorchAdamW`` elsewhere."""
    cls = RowAdamW if uses_kernels(model.weight.device) else TorchAdamW
    return cls(model, tuple(betas), weight_decay)
