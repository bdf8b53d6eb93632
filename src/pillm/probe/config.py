"""The probe study's typed config section (``probe``). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from pillm.core.config import Section


@dataclass(frozen=True)
class ProbeGradientConfig(Section):
    """The gradient-descent comparison on sampled rows of a few blocks."""

    layers: int
    rows: int
    steps: int
    lr: float
    batch_size: int


@dataclass(frozen=True)
class ProbeRowsConfig(Section):
    """Which captured rows the fits measure (``pillm.probe.masks``); all rows are fitted beside."""

    exclude_positions: tuple[int, ...]  # window positions (0: first; -1: last) left out
    exclude_special: bool = True  # BOS/EOS/pad/[CLS]/[SEP] rows of the tokenizer left out
    exclude_massive: float = 20.0  # per block: rows whose FFN output norm exceeds this x the
    # batch's median row norm (attention sinks away from position 0); 0: off
    massive_change: float = 0.01  # the tables show R²_lin without that rule beside a block's
    # where the two differ by more than this


@dataclass(frozen=True)
class ProbeConfig(Section):
    """What one ``probe`` job receives: the probe section without ``models`` (the DAG's list)."""

    hub_models: dict[str, str]  # short name -> hub id
    corpora: tuple[str, ...]
    swap_corpora: tuple[str, ...]
    seq_len: int
    fit_windows: int
    eval_windows: int
    batch_size: int
    holdout_every: int
    bilinear_rank: int
    low_rank_factor: int
    gradient: ProbeGradientConfig
    rows: ProbeRowsConfig
    outlier_features: int = 4  # k: output coordinates of largest variance set aside
    bootstrap_resamples: int = 1000  # correlations between per-block quantities (over blocks)
    refit_resamples: int = 200  # R²_lin intervals (over windows, every block refitted on each)
    min_blocks: int = 10  # fewest blocks per model (seed) a correlation's direction needs
    # model -> blocks probed, spread evenly over depth (first and last kept); a job receives
    # its own model's entry alone (plan.job_params); a model not named: every block
    max_blocks: dict[str, int] = field(default_factory=dict)
