"""The generative study's plan, torch-free: its settings (one per fitted model), seeds,
learning-rate grids, config checks and each job's GPU memory (memory.py): what
``generative.smk`` expands."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, fields
from pathlib import PurePath
from typing import Any

from pillm.core.config import ConfigError, Section
from pillm.data.image_specs import IMAGE_DATASETS
from pillm.generative.config import ClassifierJobConfig, GenerativeConfig
from pillm.generative.memory import adamw_out_memory_mb, pil_fit_memory_mb


def check(config: dict[str, Any]) -> None:
    check_generative(config["generative"])


# ---- Generative settings ---------------------------------------------------------------------
# One *setting* per fitted model. The arms come in families of one network: the PIL fit (closed-
# form output layer), the same network with every weight trained by AdamW (its rate picked from
# generative.gradient.lr_grid on held-out images) and AdamW on the output layer alone over the
# PIL fit's own features and pairs (adamw_out.py): flow matching, diffusion with one ε weight set
# shared over t, and (on ablation_datasets, generative.ablations.bucketed) diffusion with one
# weight set per bucket of t. Every arm runs every seed of generative.seeds; the PIL ablations
# (width, Bi-PIL, time encoding) run the first seed only.

FAMILIES = ("flow", "diff", "diff_bucketed")  # the arm families, one full-network lr grid each
METHODS = ("pil", "adamw", "adamw_out")  # the arms of each family


@dataclass(frozen=True)
class Setting:
    """One fit of one generative model; ``ablation``/``level`` say what it varies."""

    name: str
    model: str  # "flow" | "diffusion"
    method: str  # one of METHODS
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
        """An arm of a family (PIL and its AdamW opponents): runs every seed (ablations run the
        first)."""
        return self.ablation == "main"


def _arms(family: str, model: str, n_buckets: int) -> list[Setting]:
    return [Setting(f"{family}_{m}", model, m, "main", m, {}, n_buckets, family) for m in METHODS]


def families(cfg: dict, dataset: str) -> list[str]:
    """The arm families configured on ``dataset`` (the ``generative`` section)."""
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
    out = [s for fam in families(cfg, dataset) for s in _arms(fam, *models[fam])]
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
        LR_RUN.format(dataset=dataset, family=family, lr=lr_tag(lr))
        for lr in cfg["gradient"]["lr_grid"]
    ]


def check_generative(cfg: dict) -> None:
    """Config errors that the schema cannot express, named by key (dataset names, activations
    and encodings are schema enums)."""
    check_sizes(cfg)
    if cfg["features"]["width"] < 2 and cfg["ablations"]["bipil"]:
        raise ConfigError(
            "generative.features.width must be >= 2 for the Bi-PIL ablation "
            "(two projections of width/2); raise it or set generative.ablations.bipil: false"
        )
    d = cfg["diffusion"]
    if not d["beta_start"] <= d["beta_end"] < d["timesteps"] / 1000:
        raise ConfigError(
            "generative.diffusion: need beta_start <= beta_end < timesteps/1000 (the betas are "
            f"scaled by 1000/timesteps); got {d['beta_start']}, {d['beta_end']}, {d['timesteps']}"
        )
    if d["n_buckets"] > d["timesteps"]:
        raise ConfigError(
            f"generative.diffusion.n_buckets ({d['n_buckets']}) exceeds generative.diffusion."
            f"timesteps ({d['timesteps']}): each bucket needs at least one timestep"
        )
    out = cfg["adamw_out"]
    if out["lr_extend"] and len(set(out["lr_grid"])) < 2:
        raise ConfigError(
            "generative.adamw_out.lr_extend extends the grid by its ratio, which needs two "
            "distinct rates in generative.adamw_out.lr_grid; add one or set lr_extend: 0"
        )
    if cfg["ablations"]["bucketed"] and d["n_buckets"] < 2:
        raise ConfigError(
            "generative.ablations.bucketed needs generative.diffusion.n_buckets >= 2 (with one "
            "bucket the bucketed pair is the shared-weight pair); raise it or set bucketed: false"
        )


def check_sizes(cfg: dict) -> None:
    """Subsets no larger than the splits they are drawn from, for every configured dataset:
    n_train and classifier.n_train of the train split, n_eval of the test split."""
    for ds in sorted({*cfg["datasets"], *cfg["ablation_datasets"]}):
        train, test = IMAGE_DATASETS[ds].rows
        for key, n, split, rows in (
            ("n_train", cfg["n_train"], "train", train),
            ("classifier.n_train", cfg["classifier"]["n_train"], "train", train),
            ("n_eval", cfg["n_eval"], "test", test),
        ):
            if n > rows:
                raise ConfigError(
                    f"generative.{key} = {n:,} exceeds the {rows:,} images of {ds}'s {split} "
                    f"split: lower it" + (" (0 takes the whole split)" if split == "train" else "")
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
# Patterns name their wildcards in braces; the lists are a config's concrete files.

IMAGES = "generative/{dataset}/images.npz"  # gen-images' output, every job's input
RUN = "generative/{dataset}/{setting}/seed{seed}"  # one fit's run folder
GRID = "generative/{dataset}/lr_{family}"  # one learning-rate grid's folder
LR_RUN = GRID + "/runs/lr{lr}.json"  # one rate of a grid
# generated tables/gen_<name>.tex and figures/gen_<name>.pdf, .png
TABLES = ("main", "speed", "lr", "ablations", "samplers", "cost", "adamw_out")
FIGURES = ("samples", "lambda", "samplers", "budget", "adamw_out")


def classifier_files() -> dict[str, str]:
    """gen-classifier's outputs: the feature CNN and its accuracy and real-vs-real floor."""
    return {
        "model": "generative/{dataset}/classifier.pt",
        "metrics": "generative/{dataset}/classifier.json",
    }


def lr_pick_outputs() -> dict[str, str]:
    """gen-lr-pick's outputs: one grid's pick and its rates' held-out curves."""
    return {"lr": f"{GRID}/lr.json", "curves": f"{GRID}/curves.parquet"}


def job_inputs(config: dict[str, Any], dataset: str, setting: str, seed: int) -> dict[str, Any]:
    """A job's images, the classifier its samples are scored in and its rate's source (``lr``:
    an AdamW arm's grid pick, ``out_rate_files``; none for a PIL fit)."""
    rate = lr_pick_files(config, dataset, setting) + out_rate_files(config, dataset, setting, seed)
    model = classifier_files()["model"].format(dataset=dataset)
    return {"images": IMAGES.format(dataset=dataset), "classifier": model, "lr": rate}


def job_outputs() -> dict[str, str]:
    """A generative job's run folder: metrics, curves, sampler grid and sample image."""
    return {
        "metrics": f"{RUN}/metrics.json",
        "curves": f"{RUN}/curves.parquet",
        "samplers": f"{RUN}/samplers.parquet",
        "grid": f"{RUN}/samples.png",
    }


def summary_files() -> dict[str, str]:
    """gen-aggregate's outputs: the study's summary tables and its claim frame."""
    names = ("curves", "samplers", "classifiers", "lr", "lr_curves", "speed")
    return {
        "runs": "summary/generative.parquet",
        **{n: f"summary/generative_{n}.parquet" for n in names},
        "claims": "summary/claims/generative.parquet",
    }


def grids_root(grid: str) -> str:
    """The folder of every fit's run folder (``results/<name>/generative``), from one of their
    sample grids (``<root>/<dataset>/<setting>/seed<s>/samples.png``)."""
    return str(PurePath(grid).parents[3])


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every generative fit."""
    return [
        f"{RUN.format(dataset=ds, setting=s, seed=seed)}/{name}"
        for ds, s, seed in generative_jobs(config)
    ]


def lr_grid_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every learning-rate grid job."""
    return [
        f"{GRID.format(dataset=ds, family=fam)}/{name}"
        for ds, fam in lr_grids(config["generative"])
    ]


def lr_pick_files(config: dict[str, Any], dataset: str, setting: str) -> list[str]:
    """An AdamW setting's learning-rate pick (its family's grid job); none for a PIL fit."""
    s = settings(config["generative"], dataset)[setting]
    if s.method != "adamw":
        return []
    return [f"{GRID.format(dataset=dataset, family=s.family)}/lr.json"]


def out_rate_files(config: dict[str, Any], dataset: str, setting: str, seed: int) -> list[str]:
    """An output-layer AdamW arm's later seed trains the rate its first seed picked on the grid
    (as the full-network arm's seeds train their grid's pick): that run's metrics; none else."""
    first = config["generative"]["seeds"][0]
    if settings(config["generative"], dataset)[setting].method != "adamw_out" or seed == first:
        return []
    return [f"{RUN.format(dataset=dataset, setting=setting, seed=first)}/metrics.json"]


def chooses_out_rate(config: dict[str, Any], dataset: str, setting: str, seed: int) -> bool:
    """The output-layer arm's first seed: the later seeds wait for its rate."""
    method = settings(config["generative"], dataset)[setting].method
    return method == "adamw_out" and seed == config["generative"]["seeds"][0]


def aggregate_inputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """What gen-aggregate stacks: every fit's records, every classifier's, every grid's."""
    return {
        "metrics": job_files(config, "metrics.json"),
        "curves": job_files(config, "curves.parquet"),
        "samplers": job_files(config, "samplers.parquet"),
        "classifiers": [
            f"generative/{ds}/classifier.json" for ds in config["generative"]["datasets"]
        ],
        "lr": lr_grid_files(config, "lr.json"),
        "lr_curves": lr_grid_files(config, "curves.parquet"),
    }


# ---- What each job reserves: GPU memory, start priority, MPS priority --------------------------


def is_adamw(config: dict[str, Any], dataset: str, setting: str) -> bool:
    return settings(config["generative"], dataset)[setting].method == "adamw"


def is_bulk(config: dict[str, Any], dataset: str, setting: str, seed: int) -> bool:
    """A PIL or output-layer AdamW fit: their kernels (Gram products, the feature cache and its
    held-out passes) are large and fill the GPU, so under MPS they yield to the full-network
    AdamW arms' chains of small kernels (``--mps-bulk``, pillm.cli); not the output-layer arm's
    first seed, which later seeds wait for."""
    job = (config, dataset, setting)
    return not is_adamw(*job) and not chooses_out_rate(*job, seed)


def gpu_need(config: dict[str, Any], dataset: str, setting: str) -> str | int:
    """What a fit's gpu_mem_mb reserves (workflow/rules/common.smk gpu_mem): a full-network
    AdamW arm the ``generative_adamw`` figure of config/resources.yaml, a PIL fit MiB by its
    features, an output-layer AdamW fit MiB by its cached rows."""
    g = config["generative"]
    s = settings(g, dataset)[setting]
    if s.method == "adamw_out":
        return adamw_out_memory_mb(g, dataset, s)
    return "generative_adamw" if s.method == "adamw" else pil_fit_memory_mb(g, dataset, s)


def priority_class(config: dict[str, Any], dataset: str, setting: str, seed: int) -> str:
    """A fit's start-priority class (config/resources.yaml): the output-layer arm's first seed
    (later seeds wait for its rate) first, then the gradient arms, then the PIL fits."""
    if chooses_out_rate(config, dataset, setting, seed):
        return "generative_out_rate"
    gradient = settings(config["generative"], dataset)[setting].method != "pil"
    return "generative_adamw" if gradient else "generative_pil"


# ---- What each rule passes its job: the config it depends on ---------------------------------


def typed_section(section: type[Section], values: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``values`` that the typed config ``section`` declares: what a job checks
    into that section, and all a rule's params pass it, so other keys keep its results."""
    return {f.name: values[f.name] for f in fields(section)}


def classifier_params(config: dict[str, Any]) -> dict[str, Any]:
    """A gen-classifier job's config (ClassifierJobConfig): ``classifier`` and the keys its
    real-vs-real floor uses (seed, n_eval, kid_subsets, kid_subset_size)."""
    return typed_section(ClassifierJobConfig, config["generative"])


def job_params(config: dict[str, Any]) -> dict[str, Any]:
    """A generative or gen-lr-run job's config (GenerativeConfig): the generative section less
    ``datasets`` (the DAG's list) and ``classifier`` (its job's output is an input file)."""
    return typed_section(GenerativeConfig, config["generative"])


def tables_params(config: dict[str, Any]) -> dict[str, Any]:
    """What gen-tables reads: the build's ``name`` and the whole ``generative`` section (the
    tables and macros quote its settings)."""
    return {"name": config["name"], "generative": config["generative"]}


# ---- The arguments of each GPU rule's command (a params function of the job) -----------------
# ``wildcards``, ``input`` and ``output`` are the job's, as Snakemake passes them to a params
# function; --params carries the job's config as JSON, shell-quoted.


def _json_arg(values: dict[str, Any]) -> str:
    return shlex.quote(json.dumps(values, sort_keys=True))


def classifier_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """gen-classifier's arguments: ``--dataset``, ``--params`` (``classifier_params``),
    ``--images`` and ``--out-dir`` (the folder of its outputs)."""
    return (
        f"--dataset {wildcards.dataset} --params {_json_arg(classifier_params(config))}"
        f" --images {input.images} --out-dir {os.path.dirname(output.model)}"
    )


def lr_run_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """gen-lr-run's arguments: ``--dataset``, ``--family``, ``--lr`` (the grid rate, as it names
    the run), ``--params`` (``job_params``), ``--images`` and ``--out`` (the run's json)."""
    return (
        f"--dataset {wildcards.dataset} --family {wildcards.family} --lr {wildcards.lr}"
        f" --params {_json_arg(job_params(config))} --images {input.images} --out {output[0]}"
    )


def job_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """generative's arguments: ``--dataset``, ``--setting``, ``--seed``, ``--params``
    (``job_params``), ``--images``, ``--classifier``, ``--lr`` (an AdamW arm's pick, an
    output-layer arm's first seed's record) and ``--out-dir`` (the run folder); ``--mps-bulk``
    for a PIL fit (``is_bulk``)."""
    lr = f" --lr {input.lr}" if input.lr else ""
    job = (wildcards.dataset, wildcards.setting, int(wildcards.seed))
    bulk = " --mps-bulk" if is_bulk(config, *job) else ""
    return (
        f"--dataset {wildcards.dataset} --setting {wildcards.setting} --seed {wildcards.seed}"
        f" --params {_json_arg(job_params(config))} --images {input.images}"
        f" --classifier {input.classifier}{lr} --out-dir {os.path.dirname(output.metrics)}{bulk}"
    )
