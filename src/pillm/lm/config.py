"""The LM study's typed config sections (``model``, ``train``, ``pil``, ``sensitivity``,
``lambada``, ``samples``): what its jobs read from the JSON the CLI hands them. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from pillm.core.config import ConfigError, Section
from pillm.data.config import DataConfig


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


# ---- The scaling study (lm/scaling.py, lm/scaling_run.py, lm/scaling_report.py) -------------


@dataclass(frozen=True)
class ScalingPointParams(Section):
    """What ``scaling-point`` receives as ``--params`` (``pillm.lm.scaling.point_params``)."""

    corpus: str
    point: str  # pillm.lm.scaling.Point.name
    runs: dict  # variant -> its run-lm params (LMParams) at the point, rate set by the job
    seeds: tuple[int, ...]  # the first picks each family's rate
    lrs: tuple[float, ...]
    lr_extend: int
    families: dict  # family -> its variants; the first picks the family's rate


@dataclass(frozen=True)
class ScalingTokensParams(Section):
    """What ``scaling-tokens`` receives: the train fraction kept and the evaluation cap."""

    fraction: float
    eval_tokens: int  # 0: whole validation and test splits


@dataclass(frozen=True)
class ScalingCostParams(Section):
    """What ``scaling-cost`` receives: the LM sections at the base depth, the widths timed."""

    model: ModelConfig
    train: TrainConfig
    pil: PILConfig
    widths: tuple[int, ...]
    head_dim: int
    repeats: int
    alone: bool = False  # the rule kept every other GPU job off the device (a CUDA host)


@dataclass(frozen=True)
class ScalingReportParams(Section):
    """What ``scaling-report`` receives (``pillm.lm.scaling.report_params``)."""

    main: str  # the corpus that runs every axis
    axes: dict  # corpus -> axis -> point names, smallest first
    variants: dict  # corpus -> its variants
    seeds: tuple[int, ...]
    families: dict
    epochs: int  # of every scaling run
    lrs: tuple[float, ...]  # the rate grid before any extension
    margin: float  # share slope: flat within +- this (fraction) per doubling
    resamples: int  # bootstrap resamples of the slope
    overfit_tol: float  # nats the final validation loss may sit above the curve's minimum
    name: str
