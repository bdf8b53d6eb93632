"""The generative study's typed config sections (``generative``). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from pillm.core.config import Section


@dataclass(frozen=True)
class GenFeaturesConfig(Section):
    """The random-feature layer of the main settings (features.FeatureConfig's config keys)."""

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
    ``grid_fraction`` of the steps, first seed, picked on held-out images), the held-out
    evaluation interval of the training curve, and the rules every gradient arm's record
    applies (generative.convergence): trained (``trained_drop``) and flattened (``flat_evals``,
    ``flat_tol``)."""

    flow_steps: int
    diffusion_steps: int
    batch_size: int
    lr_grid: tuple[float, ...]
    grid_fraction: float
    warmup: int
    eval_every: int
    trained_drop: float
    flat_evals: int
    flat_tol: float


@dataclass(frozen=True)
class GenAdamwOutConfig(Section):
    """AdamW on the output layer alone over the PIL fit's features and pairs (adamw_out.py): its
    own learning-rate grid (per seed, on held-out images), the passes of falling rate once its
    held-out curve flattened, and the cap on passes."""

    lr_grid: tuple[float, ...]
    lr_extend: int
    max_epochs: int
    anneal_epochs: int


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
    adamw_out: GenAdamwOutConfig
    ablations: GenAblationsConfig
    kid_subsets: int
    kid_subset_size: int
    grid: int
    real_fid: bool
