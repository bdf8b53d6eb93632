"""The SST-2 adapter study's plan, torch-free: its job list."""

from __future__ import annotations

from typing import Any

from pillm.core.config import ConfigError


def check(config: dict[str, Any]) -> None:
    lora_model_names(config)


def lora_model_names(config: dict[str, Any]) -> list[str]:
    """The SST-2 jobs' model names, ``<model>-s<seed>`` for every lora.models and lora.seeds:
    the seed draws the fit/dev subsets, W_down, LoRA's init and batch order, and for ``pillm``
    also picks the base model (``pillm-s<k>`` is this config's baseline of lm seed k)."""
    lora = config["lora"]
    missing = sorted(set(lora["seeds"]) - set(config["lm"]["seeds"]))
    if "pillm" in lora["models"] and missing:
        raise ConfigError(
            f"lora.seeds {missing} are not in lm.seeds {config['lm']['seeds']}: the pillm "
            "base model of lora seed k is the baseline of lm seed k; use lm seeds in "
            "lora.seeds or drop pillm from lora.models"
        )
    return [f"{m}-s{s}" for m in lora["models"] for s in lora["seeds"]]


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every SST-2 job (model-major, then lora.methods)."""
    methods = config["lora"]["methods"]
    return [f"lora/{m}/{k}/{name}" for m in lora_model_names(config) for k in methods]
