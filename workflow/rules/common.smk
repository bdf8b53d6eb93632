# Config validation, paths, code dependencies and target lists shared by every stage.
import glob
import json
import os

from pillm.config import validate_config

validate_config(config, "config/schema.yaml")

CORPUS = config["data"]["corpus"]
VARIANTS = config["lm"]["variants"]
SEEDS = config["lm"]["seeds"]


def src(*modules):
    """The package modules a job executes, listed as its inputs so that editing
    one reruns the job (Snakemake does not follow imports)."""
    return [f"src/pillm/{m}.py" for m in ("__main__", "records", *modules)]


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def lm_runs(name):
    return expand(
        "results/lm/{variant}/seed{seed}/{name}",
        variant=VARIANTS,
        seed=SEEDS,
        name=name,
    )


def all_targets():
    return [
        "paper/generated/numbers.tex",
        "paper/generated/tables/lm_main.tex",
        "paper/generated/figures/training_curves.pdf",
        "paper/main.pdf",
        "results/paper/arxiv.tar.gz",
    ]


def parent(path):
    return os.path.dirname(path)
