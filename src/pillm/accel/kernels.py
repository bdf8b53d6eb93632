"""Where the project's Triton kernels run: on CUDA tensors, and on CPU tensors under the Triton
interpreter (``TRITON_INTERPRET=1``, for tests). Used by the fused output layer
(``pillm.lm.kernels.fused_ce``) and SAFFU's fixed-order gradient (``pillm.saffu.kernels.segment_sum``); each
imports its kernel module only where it runs, so a CPU job does not pay for importing Triton."""

import importlib.util
import os

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    return HAS_TRITON


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (the kernels then run on CPU tensors, for tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def uses_kernels(device: torch.device) -> bool:
    """Whether Triton kernels run on tensors of this device."""
    return HAS_TRITON and (device.type == "cuda" or interpreting())


def block_width(d: int) -> int:
    """The power of two (at least 16) a kernel's row of ``d`` entries is padded to."""
    return max(16, 1 << (d - 1).bit_length())
