"""The generative study's plan, torch-free: its settings (one per fitted model), seeds,
learning-rate grids, config checks and GPU memory model (what ``generative.smk`` expands)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def check(config: dict[str, Any]) -> None:
    check_generative(config["generative"])


# ---- Generative settings ---------------------------------------------------------------------
# One *setting* per fitted model. The arms come in pairs of one network: the PIL fit (closed-form
# output layer) and the same network with every weight trained by AdamW at a learning rate picked
# from generative.gradient.lr_grid on held-out images: flow matching, diffusion with one ε weight
# set shared over t, and (on ablation_datasets, generative.ablations.bucketed) diffusion with one
# weight set per bucket of t. Every arm runs every seed of generative.seeds; the PIL ablations
# (width, Bi-PIL, time encoding) run the first seed only.

FAMILIES = ("flow", "diff", "diff_bucketed")  # the AdamW families, one learning-rate grid each


@dataclass(frozen=True)
class Setting:
    """One fit of one generative model; ``ablation``/``level`` say what it varies."""

    name: str
    model: str  # "flow" | "diffusion"
    method: str  # "pil" | "adamw"
    ablation: str  # "main" (an arm), "width", "projections", "time_encoding"
    level: str
    features: dict  # overrides of generative.features
    n_buckets: int = 1  # diffusion: ε weight sets over t (PIL solves, AdamW trains, each)
    family: str = ""  # the arm pair it belongs to (FAMILIES); "" for an ablation

    def feature_options(self, cfg: dict) -> dict:
        """generative.features with this setting's overrides (generative.features.FeatureConfig)."""
        return {**cfg["features"], **self.features}

    @property
    def is_arm(self) -> bool:
        """An arm of a PIL-vs-AdamW pair: runs every seed (ablations run the first)."""
        return self.ablation == "main"


def _arm_pair(family: str, model: str, n_buckets: int) -> list[Setting]:
    return [
        Setting(f"{family}_{m}", model, m, "main", m, {}, n_buckets, family)
        for m in ("pil", "adamw")
    ]


def families(cfg: dict, dataset: str) -> list[str]:
    """The arm pairs configured on ``dataset`` (the ``generative`` section)."""
    bucketed = cfg["ablations"]["bucketed"] and dataset in cfg["ablation_datasets"]
    return ["flow", "diff", *(["diff_bucketed"] if bucketed else [])]


def settings(cfg: dict, dataset: str) -> dict[str, Setting]:
    """Every setting the config asks for on ``dataset`` (the ``generative`` section)."""
    f, d = cfg["features"], cfg["diffusion"]
    models = {
        "flow": ("flow", 1),
        "diff": ("diffusion", 1),
        "diff_bucketed": ("diffusion", d["n_buckets"]),
    }
    out = [s for fam in families(cfg, dataset) for s in _arm_pair(fam, *models[fam])]
    if dataset in cfg["ablation_datasets"]:
        a = cfg["ablations"]
        for w in a["width"]:
            if w != f["width"]:
                out.append(Setting(f"flow_pil_w{w}", "flow", "pil", "width", str(w), {"width": w}))
        if a["bipil"]:
            # Bi-PIL: two random projections of half the width, so the feature count is equal.
            half = {"n_proj": 2, "width": f["width"] // 2}
            out.append(Setting("flow_bipil", "flow", "pil", "projections", "2", half))
        for enc in a["time_encoding"]:
            if enc != f["time_encoding"]:
                te = {"time_encoding": enc}
                out.append(Setting(f"flow_pil_{enc}", "flow", "pil", "time_encoding", enc, te))
    return {s.name: s for s in out}


def pil_fit_memory_mb(cfg: dict, dataset: str, setting: Setting) -> int:
    """GPU memory (MiB) a PIL fit of ``setting`` on ``dataset`` declares (``generative``
    section): its float64 Gram and cross-products hold p² + p·D numbers for p features and D
    pixels, and the fit's allocator peak was 7.7-8.8 times those bytes where p >= 2,833 (one
    H100, commit 5c2ff7b: 680-5,121 MiB over p = 2,833-8,977 and D = 784, 3,072; 473 MiB at
    p = 1,809, where the images and samples weigh more). Declared: ten times, plus 1 GiB for
    the CUDA context and the allocator's cache. (A flat 8 GB before: the twenty fits declared
    160 GB, their peaks summed to 55 GB, and at the two-GPU run's end they waited for declared
    memory that lay idle.)
    """
    from pillm.data.image_specs import IMAGE_DATASETS

    d = IMAGE_DATASETS[dataset].pixels
    f = setting.feature_options(cfg)
    p = f["n_proj"] * f["width"] + (d if f["direct_link"] else 0) + 1
    return 1024 + round(10 * 8 * (p * p + p * d) / 2**20)


def all_settings(cfg: dict) -> dict[str, list[str]]:
    """dataset -> setting names (what the Snakefile expands)."""
    return {ds: list(settings(cfg, ds)) for ds in cfg["datasets"]}


def setting_seeds(cfg: dict, setting: Setting) -> list[int]:
    """The seeds a setting runs: every generative.seeds for an arm, the first for an ablation."""
    seeds = list(cfg["seeds"])
    return seeds if setting.is_arm else seeds[:1]


def lr_grids(cfg: dict) -> list[tuple[str, str]]:
    """(dataset, family) of every AdamW learning-rate grid."""
    return [(ds, fam) for ds in cfg["datasets"] for fam in families(cfg, ds)]


def lr_tag(lr: float) -> str:
    """A grid rate as it names its run (``lr_<family>/runs/lr<tag>.json``): the shortest form."""
    return f"{lr:g}"


def lr_grid_runs(cfg: dict, dataset: str, family: str) -> list[str]:
    """Paths (under the results tree) of one grid's runs, a rate each of gradient.lr_grid."""
    return [
        f"generative/{dataset}/lr_{family}/runs/lr{lr_tag(lr)}.json"
        for lr in cfg["gradient"]["lr_grid"]
    ]


def check_generative(cfg: dict) -> None:
    """Config errors that the schema cannot express, named by key (dataset names, activations
    and encodings are schema enums)."""
    if cfg["features"]["width"] < 2 and cfg["ablations"]["bipil"]:
        raise ValueError(
            "generative.features.width must be >= 2 for the Bi-PIL ablation "
            "(two projections of width/2); raise it or set generative.ablations.bipil: false"
        )
    d = cfg["diffusion"]
    if not d["beta_start"] <= d["beta_end"] < d["timesteps"] / 1000:
        raise ValueError(
            "generative.diffusion: need beta_start <= beta_end < timesteps/1000 (the betas are "
            f"scaled by 1000/timesteps); got {d['beta_start']}, {d['beta_end']}, {d['timesteps']}"
        )
    if d["n_buckets"] > d["timesteps"]:
        raise ValueError(
            f"generative.diffusion.n_buckets ({d['n_buckets']}) exceeds generative.diffusion."
            f"timesteps ({d['timesteps']}): each bucket needs at least one timestep"
        )
    if cfg["ablations"]["bucketed"] and d["n_buckets"] < 2:
        raise ValueError(
            "generative.ablations.bucketed needs generative.diffusion.n_buckets >= 2 (with one "
            "bucket the bucketed pair is the shared-weight pair); raise it or set bucketed: false"
        )


def generative_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(dataset, setting, seed) of every generative fit, dataset by dataset."""
    g = config["generative"]
    return [
        (ds, s.name, seed)
        for ds in g["datasets"]
        for s in settings(g, ds).values()
        for seed in setting_seeds(g, s)
    ]


# ---- Paths under the results tree (what workflow/rules/generative.smk expands) ----------------


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every generative fit."""
    return [f"generative/{ds}/{s}/seed{seed}/{name}" for ds, s, seed in generative_jobs(config)]


def lr_grid_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every learning-rate grid job."""
    return [f"generative/{ds}/lr_{fam}/{name}" for ds, fam in lr_grids(config["generative"])]


def lr_pick_files(config: dict[str, Any], dataset: str, setting: str) -> list[str]:
    """An AdamW setting's learning-rate pick (its family's grid job); none for a PIL fit."""
    s = settings(config["generative"], dataset)[setting]
    return [f"generative/{dataset}/lr_{s.family}/lr.json"] if s.method == "adamw" else []


def is_adamw(config: dict[str, Any], dataset: str, setting: str) -> bool:
    return settings(config["generative"], dataset)[setting].method == "adamw"


def gpu_memory_mb(config: dict[str, Any], dataset: str, setting: str, adamw_mb: int) -> int:
    """GPU memory a fit declares: ``adamw_mb`` for an AdamW arm, a PIL fit by its features."""
    g = config["generative"]
    s = settings(g, dataset)[setting]
    return adamw_mb if s.method == "adamw" else pil_fit_memory_mb(g, dataset, s)


def priority_class(config: dict[str, Any], dataset: str, setting: str) -> str:
    """A fit's start-priority class (config/resources.yaml)."""
    return "generative_adamw" if is_adamw(config, dataset, setting) else "generative_pil"
