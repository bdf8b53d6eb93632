"""Typed config sections: what a job reads from the JSON dict the CLI hands it, checked once.

Torch-free. One frozen dataclass per config section a job uses; ``from_dict(d, path)`` builds it
from that section's dict, fills the defaults ``config/schema.yaml`` declares (the same values as
the dataclass defaults here: tests/test_settings.py compares them), turns lists into tuples and
nested sections into their dataclasses, and names any unknown or missing key by its dotted path
(``train.lr``). Entry functions convert their dict once at the top; everything below them
receives the section it uses, never the whole bag.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Self

from pillm.plan import ConfigError


class Section:
    """Mixin: ``from_dict`` for a frozen dataclass of config values."""

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str = "") -> Self:
        """The section from its dict; ``path`` is its dotted name, for error messages."""
        if not isinstance(d, dict):
            raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        where = f"{path}." if path else ""
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(where + k for k in unknown)}: remove them "
                f"or add them to config/schema.yaml and pillm.settings.{cls.__name__}"
            )
        missing = [
            where + name
            for name, f in fields.items()
            if name not in d
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ConfigError(f"missing config key(s) {', '.join(missing)}: set them in the config")
        return cls(**{k: _convert(hints[k], v, where + k) for k, v in d.items()})


def _convert(hint: Any, value: Any, path: str) -> Any:
    """Lists become tuples (sections are frozen); sub-sections become their dataclass."""
    if isinstance(hint, type) and issubclass(hint, Section):
        return hint.from_dict(value, path)
    sections = [a for a in typing.get_args(hint) if isinstance(a, type) and issubclass(a, Section)]
    if sections and value is not None:  # an optional sub-section: Section | None
        return sections[0].from_dict(value, path)
    origin = typing.get_origin(hint)
    if origin is tuple and isinstance(value, list):
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    return value


# ---------------------------------------------------------------- data and the LM study


@dataclass(frozen=True)
class DataConfig(Section):
    corpus: str
    local_dir: str  # the mirror (SHA256SUMS); with source auto, built there from the hub if absent
    heldout_fraction: float
    source: str = "auto"  # "auto" (local_dir's mirror, else built from the hub), "local" or "hub"


@dataclass(frozen=True)
class ModelConfig(Section):
    n_layer: int
    d_model: int
    n_head: int
    ffn_mult: int
    context: int
    dropout: float


OUTPUT_LAYERS = ("dense", "chunked", "fused")  # train.output_layer (lm/train_step.py)


def check_output_layer(output_layer: str, ce_chunk: int) -> None:
    """``train.output_layer`` is one of OUTPUT_LAYERS; ``ce_chunk`` > 0 exactly when chunked."""
    if output_layer not in OUTPUT_LAYERS:
        raise ConfigError(f"train.output_layer: {output_layer!r}, expected one of "
                          f"{', '.join(OUTPUT_LAYERS)}")  # fmt: skip
    if (output_layer == "chunked") != (ce_chunk > 0):
        raise ConfigError(f"train.ce_chunk: {ce_chunk} with train.output_layer: {output_layer}; "
                          "ce_chunk is the rows per chunk of output_layer: chunked (>= 1 there, "
                          "0 otherwise)")  # fmt: skip


@dataclass(frozen=True)
class TrainConfig(Section):
    """AdamW of the LM runs (lm/train.py, lm/train_step.py)."""

    epochs: int
    batch_size: int
    lr: float
    betas: tuple[float, ...]
    weight_decay: float
    warmup_frac: float
    min_lr_frac: float
    grad_clip: float
    max_steps: int  # 0: no cap on epochs × steps per epoch
    eval_every: int  # 0: no periodic validation
    eval_batch_size: int
    warmup_steps_timing: int
    compile: bool = False  # CUDA only
    cuda_graphs: bool = False  # CUDA only
    ce_chunk: int = 0  # CUDA only: rows per chunk of output_layer "chunked" (0 otherwise)
    output_layer: str = "dense"  # CUDA only: one of OUTPUT_LAYERS (lm/train_step.py)
    deterministic: bool = True  # CUDA only: deterministic kernels (core.runtime.deterministic)

    def __post_init__(self) -> None:
        check_output_layer(self.output_layer, self.ce_chunk)


@dataclass(frozen=True)
class PILConfig(Section):
    """Closed-form FFN solves (lm/pil.py): relative λ grid, κ bound, streaming, fgrad steps."""

    lambdas: tuple[float, ...]
    kappa_max: float
    batch_size: int
    max_tokens: int  # 0: every token of the split
    fgrad_steps: tuple[float, ...]
    grid_extend: int = 3  # points a pick on a grid edge may add on that side (lm/pil.py)


@dataclass(frozen=True)
class LMParams(Section):
    """What ``run-lm`` receives as ``--params``: the model, its training and (solving variants
    only) its closed-form solves."""

    model: ModelConfig
    train: TrainConfig
    pil: PILConfig | None = None


@dataclass(frozen=True)
class SensitivityConfig(Section):
    """The learning-rate x dropout grid of the contribution share (lm/sensitivity.py)."""

    lrs: tuple[float, ...]
    dropouts: tuple[float, ...]
    variants: tuple[str, ...]  # baseline and attn_only required; ffn_only optional
    seeds: tuple[int, ...]
    margin: float = 0.05  # sensible: baseline validation loss within this (nats) of the best


@dataclass(frozen=True)
class LambadaConfig(Section):
    max_examples: int  # 0: all
    batch_size: int


@dataclass(frozen=True)
class SamplesConfig(Section):
    prompts: tuple[str, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class ExtrasParams(Section):
    """What ``lm-extras`` receives as ``--params``."""

    lambada: LambadaConfig
    samples: SamplesConfig
    data: DataConfig


# ---------------------------------------------------------------- probe


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
    bootstrap_resamples: int = 1000  # R²_lin intervals (over windows), correlations (over blocks)


# ---------------------------------------------------------------- generative


@dataclass(frozen=True)
class GenFeaturesConfig(Section):
    """The random-feature layer of the main settings (flow.FeatureConfig's config keys)."""

    width: int
    n_proj: int
    activation: str
    time_encoding: str
    time_dim: int
    time_scale: float
    direct_link: bool


@dataclass(frozen=True)
class GenFlowConfig(Section):
    pairs_per_image: int
    ode_method: str
    ode_steps: int


@dataclass(frozen=True)
class GenDiffusionConfig(Section):
    timesteps: int
    beta_start: float
    beta_end: float
    n_buckets: int
    pairs_per_image: int
    variance: str
    clip_x0: float | None


@dataclass(frozen=True)
class GenGradientConfig(Section):
    """AdamW on the PIL arms' networks: steps per model, the learning-rate grid (run at
    ``grid_fraction`` of the steps, first seed, picked on held-out images) and the held-out
    evaluation interval of the training curve."""

    flow_steps: int
    diffusion_steps: int
    batch_size: int
    lr_grid: tuple[float, ...]
    grid_fraction: float
    warmup: int
    eval_every: int


@dataclass(frozen=True)
class GenAblationsConfig(Section):
    width: tuple[int, ...]
    bipil: bool
    time_encoding: tuple[str, ...]
    ode_steps: tuple[int, ...]
    bucketed: bool


@dataclass(frozen=True)
class ClassifierConfig(Section):
    n_train: int
    epochs: int
    batch_size: int
    lr: float
    feat_dim: int


@dataclass(frozen=True)
class ClassifierJobConfig(Section):
    """What one ``gen-classifier`` job receives: only what the classifier and its floor use."""

    classifier: ClassifierConfig
    seed: int
    n_eval: int
    kid_subsets: int
    kid_subset_size: int


@dataclass(frozen=True)
class GenerativeConfig(Section):
    """What one ``generative`` job receives: the generative section without ``datasets`` (the
    DAG's list) and ``classifier`` (that job's output is an input file already)."""

    ablation_datasets: tuple[str, ...]
    seed: int
    seeds: tuple[int, ...]
    n_train: int
    heldout_fraction: float
    n_eval: int
    features: GenFeaturesConfig
    lambdas: tuple[float, ...]
    chunk_size: int
    flow: GenFlowConfig
    diffusion: GenDiffusionConfig
    gradient: GenGradientConfig
    ablations: GenAblationsConfig
    kid_subsets: int
    kid_subset_size: int
    grid: int
    real_fid: bool


# ---------------------------------------------------------------- LoRA and SAFFU


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


@dataclass(frozen=True)
class SaffuSetting(Section):
    agg: str  # "sum" or "cat"
    block: int
    radius: int


@dataclass(frozen=True)
class SaffuJobConfig(Section):
    """What one ``saffu`` job (one setting at one train fraction) receives
    (pillm.plan.saffu_job_params): the saffu section without the DAG's lists (fractions, the
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
