"""``torch.optim.AdamW`` without the import of ``torch._dynamo`` (about 1.2 s of CPU a job).

torch wraps ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict``, ``load_state_dict``
and ``AdamW.step`` so that TorchDynamo never traces into them; each wrapper imports
``torch._dynamo`` (and through it sympy) at its first call, although no job of this pipeline
compiles an optimizer step (``torch.compile`` wraps forward and loss only; the step runs
eagerly or from a CUDA graph). This class calls the unwrapped methods: the same code on the same
tensors, so the same numbers bit for bit; only the import is gone: a process that imports torch
and takes three steps uses about 1.0 s of CPU instead of 2.2 s (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import torch


def _unwrapped(method: Any) -> Any:
    """The function a torch decorator wrapped (``functools.wraps`` keeps it as ``__wrapped__``)."""
    return getattr(method, "__wrapped__", method)


_ADD_PARAM_GROUP = _unwrapped(torch.optim.Optimizer.add_param_group)
_ZERO_GRAD = _unwrapped(torch.optim.Optimizer.zero_grad)
_STATE_DICT = _unwrapped(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = _unwrapped(torch.optim.Optimizer.load_state_dict)
_STEP = _unwrapped(torch.optim.AdamW.step)


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (every argument the same) whose methods skip torch's Dynamo-disable
    wrappers; ``step`` runs under the grad mode torch's wrapper sets (off unless
    ``differentiable``)."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _LOAD_STATE_DICT(self, state_dict)

    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch's signature)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)
