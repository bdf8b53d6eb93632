# Config validation, paths, code dependencies and target lists shared by every stage.
import glob
import json
import os

from pillm.config import check_variant_dependencies, validate_config
from pillm.variants import VARIANTS, dependencies

validate_config(config, "config/schema.yaml")
check_variant_dependencies(config)

CORPUS = config["data"]["corpus"]
RESULTS = f"results/{config['name']}"  # one tree per config: smoke and paper runs never clobber


def res(path):
    """Path under this config's results tree."""
    return f"{RESULTS}/{path}"


LM_VARIANTS = config["lm"]["variants"]
SEEDS = config["lm"]["seeds"]


wildcard_constraints:
    variant="|".join(VARIANTS),
    seed=r"\d+",


def src(*modules):
    """The package modules a job executes, listed as its inputs so that editing
    one reruns the job (Snakemake does not follow imports)."""
    return [f"src/pillm/{m}.py" for m in ("__main__", "records", *modules)]


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def lm_runs(name):
    return expand(
        res("lm/{variant}/seed{seed}/{name}"),
        variant=LM_VARIANTS,
        seed=SEEDS,
        name=name,
    )


def all_targets():
    return [
        "paper/generated/numbers.tex",
        "paper/generated/tables/lm_main.tex",
        "paper/generated/figures/training_curves.pdf",
        "paper/main.pdf",
        res("paper/arxiv.tar.gz"),
    ]


def parent(path):
    return os.path.dirname(path)


def lm_run_inputs(wildcards):
    """Runs a variant builds on (same seed): their metrics and checkpoints."""
    deps = {}
    for d in dependencies(wildcards.variant):
        run = res(f"lm/{d}/seed{wildcards.seed}")
        deps[f"dep_{d}"] = [f"{run}/metrics.json", f"{run}/model.pt"]
    return deps


def lm_params(variant):
    """Config a run depends on: the solve settings only for variants that solve."""
    cfg = {"model": config["model"], "train": config["train"]}
    if VARIANTS[variant].solves:
        cfg["pil"] = config["pil"]
    return cfg
