"""Checkpoints that rebuild any variant: gradient-trained, attention/FFN-ablated or PIL-solved.

A checkpoint is a tensor file (``pillm.core.tensor_files``): the uncompiled state dict, and as
JSON the model arguments, the PIL layout (if any) and the run's ``extra`` (its config...).
Loading one never runs code from it; anything else is refused with a message naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pillm.core.tensor_files import TensorFileError, load_tensor_file, save_tensor_file
from pillm.models.gpt import GPT, PILFFN, GPTConfig, attach_pil

KIND = "pillm.gpt"


def save_checkpoint(path: str | Path, model: GPT, extra: dict[str, Any]) -> None:
    """Model arguments, PIL layout (if any), the uncompiled state dict and ``extra`` (config...,
    plain JSON values)."""
    pil = None
    first = model.blocks[0].mlp
    if isinstance(first, PILFFN):
        pil = {"features": extra["pil_features"], "seed": extra["pil_seed"]}
    meta = {"model_args": model.cfg.to_dict(), "pil": pil, **extra}
    save_tensor_file(path, KIND, model.state_dict(), meta)


def load_checkpoint(path: str | Path, device: str = "cpu") -> GPT:
    """The model of a checkpoint, in eval mode; TensorFileError naming ``path`` for a file that
    is not a pillm checkpoint (it is never executed)."""
    ckpt = load_tensor_file(path, KIND, device)
    try:
        model = GPT(GPTConfig(**ckpt.meta["model_args"])).to(device)
        if ckpt.meta.get("pil"):
            attach_pil(model, ckpt.meta["pil"]["features"], ckpt.meta["pil"]["seed"])
        model.load_state_dict(ckpt.tensors)
    except (KeyError, TypeError, ValueError, AssertionError, RuntimeError) as err:
        raise TensorFileError(
            f"{path}: its model arguments or weights do not build a pillm GPT ({err}); rebuild it"
        ) from None
    return model.eval()
