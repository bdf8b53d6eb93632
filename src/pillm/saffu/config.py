"""The SAFFU study's typed config sections (``saffu``). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pillm.core.config import ConfigError, Section


@dataclass(frozen=True)
class SaffuSetting(Section):
    agg: str  # "sum" or "cat"
    block: int
    radius: int


@dataclass(frozen=True)
class SaffuJobConfig(Section):
    """What one ``saffu`` job (one setting at one train fraction) receives
    (pillm.saffu.plan.saffu_job_params): the saffu section without the DAG's lists (fractions, the
    n-gram baseline's ``kn``), ``settings`` keyed by name and holding only this job's, ``seeds``
    the seeds this setting runs (``seeds`` for the main setting, ``ablation_seeds`` otherwise)."""

    top_types: int
    settings: dict[str, dict[str, Any]]
    seeds: tuple[int, ...]
    inits: tuple[str, ...]
    alphas: tuple[float, ...]
    init_std: float
    lrs: tuple[float, ...]
    max_steps: int
    patience: int
    batch_size: int
    betas: tuple[float, ...]
    weight_decay: float
    warmup_steps: int
    eval_every: int
    eval_chunk: int
    alpha_extend: int = 2
    lr_extend: int = 1
    early_stop_rows: int = 0  # held-out rows early stopping watches (0: all)

    def setting(self, name: str) -> SaffuSetting:
        """The named setting; ConfigError naming the configured ones otherwise."""
        if name not in self.settings:
            raise ConfigError(
                f"saffu setting {name!r} is not in saffu.settings {sorted(self.settings)}"
            )
        return SaffuSetting.from_dict(self.settings[name], f"saffu.settings.{name}")


@dataclass(frozen=True)
class KneserNeyConfig(Section):
    """The n-gram baseline of the SAFFU study (``saffu.kn``): orders tried on held-out data and
    the discount (``modified``: Chen & Goodman's D1, D2, D3+ per order; or one number)."""

    orders: tuple[int, ...]
    discount: float | str = "modified"
    order_extend: int = 0  # orders added past an edge pick, per side
