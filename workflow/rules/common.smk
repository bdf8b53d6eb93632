# Config validation, paths, code dependencies and target lists shared by every stage.
import glob
import json
import os

from pillm.plan import check_probe_models, check_variant_dependencies, validate_config
from pillm.plan import all_settings, check_generative
from pillm.plan import VARIANTS, dependencies

validate_config(config, "config/schema.yaml")
check_variant_dependencies(config)
check_probe_models(config)
check_generative(config["generative"])

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
    corpus="wikitext2|ptb|tinyshakespeare",
    model=r"[A-Za-z0-9_-]+",
    dataset="mnist|cifar10",
    setting=r"[a-z0-9_]+",


def src(*modules):
    """The package modules a job executes, listed as its inputs so that editing
    one reruns the job (Snakemake does not follow imports)."""
    return [f"src/pillm/{m}.py" for m in ("__main__", "core/records", *modules)]


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def lm_runs(name):
    return expand(
        res("lm/{variant}/seed{seed}/{name}"),
        variant=LM_VARIANTS,
        seed=SEEDS,
        name=name,
    )


PROBE = config["probe"]


def probe_model_names():
    """probe.models with pillm expanded to this config's baseline of every seed."""
    names = []
    for m in PROBE["models"]:
        names += [f"pillm-s{s}" for s in SEEDS] if m == "pillm" else [m]
    return names


def probe_jobs(name):
    return expand(
        res("probe/{model}/{corpus}/{name}"),
        model=probe_model_names(),
        corpus=PROBE["corpora"],
        name=name,
    )


def probe_inputs(wildcards):
    """The pipeline's own models need their checkpoint and the tokenizer they were trained with."""
    if not wildcards.model.startswith("pillm-s"):
        return {}
    run = res(f"lm/baseline/seed{wildcards.model.removeprefix('pillm-s')}")
    return {
        "checkpoint": f"{run}/model.pt",
        "run_metrics": f"{run}/metrics.json",
        "tokenizer": res(f"tokens/{CORPUS}/tokenizer.json"),
    }


GEN = config["generative"]
GEN_SETTINGS = all_settings(GEN)  # dataset -> setting names


def gen_jobs(name):
    return [
        res(f"generative/{ds}/{setting}/{name}")
        for ds, names in GEN_SETTINGS.items()
        for setting in names
    ]


LORA = config["lora"]


def lora_model_names():
    """lora.models with pillm expanded to this config's baseline of every seed."""
    names = []
    for m in LORA["models"]:
        names += [f"pillm-s{s}" for s in SEEDS] if m == "pillm" else [m]
    return names


def lora_jobs(name):
    return expand(
        res("lora/{model}/{method}/{name}"),
        model=lora_model_names(),
        method=LORA["methods"],
        name=name,
    )


# The SAFFU explicit-solution baseline (workflow/rules/saffu.smk).
SAFFU = config["saffu"]
SAFFU_SETTINGS = {
    s["name"]: {k: v for k, v in s.items() if k != "name"} for s in SAFFU["settings"]
}
if len(SAFFU_SETTINGS) != len(SAFFU["settings"]):
    raise ValueError(
        "saffu.settings: two settings share a name; give each a unique name"
    )
if SAFFU["main_setting"] not in SAFFU_SETTINGS:
    raise ValueError(
        f"saffu.main_setting: {SAFFU['main_setting']!r} is not the name of a saffu.settings "
        f"entry {sorted(SAFFU_SETTINGS)}; name one of them (config/README.md)"
    )


def saffu_runs(name):
    return expand(
        res("saffu/{setting}/{init}/seed{seed}/{name}"),
        setting=list(SAFFU_SETTINGS),
        init=SAFFU["inits"],
        seed=SAFFU["seeds"],
        name=name,
    )


def saffu_job_params(setting):
    """The saffu config one job depends on: its own setting, not the other settings."""
    cfg = {k: v for k, v in SAFFU.items() if k not in ("settings", "seeds", "inits")}
    return {**cfg, "settings": {setting: SAFFU_SETTINGS[setting]}}


def all_targets():
    return [
        "paper/generated/numbers.tex",
        "paper/generated/tables/lm_main.tex",
        "paper/generated/probe_numbers.tex",
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
