"""Checkpoints that rebuild any variant: gradient-trained, attention/FFN-ablated or PIL-solved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pillm.core.records import atomic_path
from pillm.models.gpt import GPT, PILFFN, GPTConfig, attach_pil


def save_checkpoint(path: str | Path, model: GPT, extra: dict[str, Any]) -> None:
    """Model arguments, PIL layout (if any), the uncompiled state dict and ``extra`` (config...)."""
    pil = None
    first = model.blocks[0].mlp
    if isinstance(first, PILFFN):
        pil = {"features": extra["pil_features"], "seed": extra["pil_seed"]}
    with atomic_path(path) as tmp:
        torch.save(
            {
                "model_args": model.cfg.to_dict(),
                "pil": pil,
                "state_dict": model.state_dict(),
                **extra,
            },
            tmp,
        )


def load_checkpoint(path: str | Path, device: str = "cpu") -> GPT:
    ckpt = torch.load(path, map_location=device, weights_only=False)
    model = GPT(GPTConfig(**ckpt["model_args"])).to(device)
    if ckpt.get("pil"):
        attach_pil(model, ckpt["pil"]["features"], ckpt["pil"]["seed"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()
