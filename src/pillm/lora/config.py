"""The SST-2 adapter study's typed config section (``lora``). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from pillm.core.config import Section


@dataclass(frozen=True)
class LoraConfig(Section):
    """What one ``lora`` job receives: the lora section without ``models`` and ``seeds`` (the
    DAG's lists; a job's seed is in its model name, ``<model>-s<seed>``)."""

    methods: tuple[str, ...]
    n_train: int
    n_dev: int
    max_len: int
    batch_size: int
    pil_rank: int
    lambdas: tuple[float, ...]
    kappa_max: float
    lora_rank: int
    lora_alpha: float
    lora_dropout: float
    lrs: tuple[float, ...]
    lr_extend: int
    max_steps: int
    eval_every: int
    patience: int
    train_batch_size: int
    weight_decay: float
    adapter_etas: tuple[float, ...]
    min_steps: int = 0  # early stopping counts patience only after max(warm-up, min_steps)
    trained_alpha: float = 1e-3  # trained: beats the majority class at binomial p < this
    lora_modules: str = "all_linear"  # LoRA on: "all_linear" maps in the blocks | "attention"
