"""The SAFFU study's plan, torch-free: its settings, jobs (one setting, train fraction and seed
each), which job chooses the rates others reuse, each job's config, the study's relative result
paths and the arguments its rules (workflow/rules/saffu.smk) pass to ``python -m pillm``."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from pillm.core.config import ConfigError
from pillm.core.selection import check_extendable
from pillm.saffu.data import fraction_tag


def check(config: dict[str, Any]) -> None:
    """What the schema cannot say: the main setting is one of the settings, names are unique,
    and every grid that is extended past an edge has a ratio."""
    saffu_settings(config)
    saffu = config["saffu"]
    check_extendable(saffu["alphas"], saffu["alpha_extend"], "saffu.alphas", "saffu.alpha_extend")
    check_extendable(saffu["lrs"], saffu["lr_extend"], "saffu.lrs", "saffu.lr_extend")


def saffu_settings(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """saffu.settings by name (without the name); ConfigError on a duplicate name or a
    saffu.main_setting that names none of them."""
    saffu = config["saffu"]
    named = {s["name"]: {k: v for k, v in s.items() if k != "name"} for s in saffu["settings"]}
    if len(named) != len(saffu["settings"]):
        raise ConfigError("saffu.settings: two settings share a name; give each a unique name")
    if saffu["main_setting"] not in named:
        raise ConfigError(
            f"saffu.main_setting: {saffu['main_setting']!r} is not the name of a saffu.settings "
            f"entry {sorted(named)}; name one of them (config/README.md)"
        )
    return named


def saffu_job_params(config: dict[str, Any], setting: str, seed: int) -> dict[str, Any]:
    """The saffu config one job (one setting, train fraction and seed) depends on: its own
    setting and seed, not the other settings or seeds, the fraction list or the n-gram
    baseline. ConfigError when ``seed`` is not one of the setting's seeds."""
    saffu = config["saffu"]
    left_out = ("settings", "main_setting", "fractions", "ablation_seeds", "kn")
    cfg = {k: v for k, v in saffu.items() if k not in left_out}
    if seed not in saffu_seeds(config, setting):
        key = "seeds" if setting == saffu["main_setting"] else "ablation_seeds"
        raise ConfigError(f"saffu.{key}: {seed} is not one of {saffu[key]} (setting {setting!r})")
    return {**cfg, "seeds": [seed], "settings": {setting: saffu_settings(config)[setting]}}


def saffu_seeds(config: dict[str, Any], setting: str) -> list[int]:
    """``seeds`` for the main setting, ``ablation_seeds`` for the others."""
    saffu = config["saffu"]
    return list(saffu["seeds"] if setting == saffu["main_setting"] else saffu["ablation_seeds"])


def saffu_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(setting, fraction tag, seed) of every SAFFU job: the main setting at every
    ``fractions`` entry and on the full train split, every other setting on the full split
    (tag ``f100``), each at every seed of its own (``saffu_seeds``). One seed a job: the
    first seed chooses the rates and the later ones start as soon as it has, so no job waits
    for the later seeds' training of another."""
    saffu = config["saffu"]
    fractions = sorted({float(f) for f in saffu["fractions"]} | {1.0})
    main = saffu["main_setting"]
    cells = [(main, fraction_tag(f)) for f in fractions]
    cells += [(s, fraction_tag(1.0)) for s in saffu_settings(config) if s != main]
    return [(s, tag, seed) for s, tag in cells for seed in saffu_seeds(config, s)]


def saffu_job(setting: str, tag: str, seed: int) -> str:
    """A SAFFU job's folder under ``saffu/``: ``<setting>/<tag>/seed<seed>``."""
    return f"{setting}/{tag}/seed{seed}"


def saffu_rates_job(config: dict[str, Any], setting: str, tag: str, seed: int) -> str | None:
    """The job (``saffu_job``) whose chosen rates a job reuses, None for a job that chooses
    them: the main setting's first seed at every fraction chooses; its later seeds reuse that
    job's rates, and every other setting the main setting's first seed on the full train split."""
    main = config["saffu"]["main_setting"]
    first = saffu_seeds(config, main)[0]
    if setting != main:
        return saffu_job(main, fraction_tag(1.0), first)
    return None if seed == first else saffu_job(main, tag, first)


def saffu_fraction(config: dict[str, Any], tag: str) -> float:
    """The train fraction of a job's tag (``f10`` -> 0.1); ConfigError for an unknown tag."""
    fractions = {fraction_tag(f): float(f) for f in [*config["saffu"]["fractions"], 1.0]}
    if tag not in fractions:
        raise ConfigError(f"saffu: no train fraction has the tag {tag!r} ({sorted(fractions)})")
    return fractions[tag]


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every SAFFU job."""
    return [f"saffu/{saffu_job(*job)}/{name}" for job in saffu_jobs(config)]


def chooses_rates(config: dict[str, Any], setting: str, tag: str, seed: int) -> bool:
    """Whether other SAFFU jobs reuse this job's chosen rates (they wait for it)."""
    job = saffu_job(setting, tag, seed)
    return job in {saffu_rates_job(config, *j) for j in saffu_jobs(config)}


def rates_files(config: dict[str, Any], setting: str, tag: str, seed: int) -> list[str]:
    """The metrics of the job whose chosen rates this job reuses; none for a job that chooses."""
    job = saffu_rates_job(config, setting, tag, seed)
    return [] if job is None else [f"saffu/{job}/metrics.json"]


def priority_class(config: dict[str, Any], setting: str, tag: str, seed: int) -> str:
    """A job's start-priority class (config/resources.yaml): jobs whose rates others reuse
    first; SAFFU jobs are the longest."""
    return "saffu_rates" if chooses_rates(config, setting, tag, seed) else "saffu"


def memory_class(config: dict[str, Any], setting: str, tag: str, seed: int) -> str:
    """A job's GPU-memory class (config/resources.yaml): a job that reuses chosen rates keeps
    one weight set, one that chooses them two."""
    return "saffu_reuse" if saffu_rates_job(config, setting, tag, seed) else "saffu"


def is_bulk(config: dict[str, Any], setting: str, tag: str, seed: int) -> bool:
    """Whether a job runs at MPS's below-normal client priority (``--mps-bulk``, pillm.cli):
    every job but those whose chosen rates other jobs wait for, which gate the
    jobs after them and so run at the normal one."""
    return not chooses_rates(config, setting, tag, seed)


# ---------------------------------------------------------------- paths and arguments of the rules

# One job's folder under the results tree (wildcards: setting, fraction tag, seed).
JOB = "saffu/{setting}/{frac}/seed{seed}"
TOKEN_FILES = ("train.npy", "valid.npy", "test.npy", "meta.json")
# The aggregation's outputs: the summaries the tables and figures read and the claim frame.
SUMMARIES = {
    "runs": "summary/saffu_runs.parquet",
    "summary": "summary/saffu.parquet",
    "curves": "summary/saffu_curves.parquet",
    "kn": "summary/kneser_ney.parquet",  # the LM table's Kneser-Ney row
    "claims": "summary/claims/saffu.parquet",
}
TABLES = ("saffu", "saffu_sizes", "saffu_ablation")
FIGURES = ("saffu_curves", "saffu_ablation")


def job_folder(config: dict[str, Any]) -> str:
    """``JOB`` with its wildcards constrained, as the output of the ``saffu`` rule: a setting of
    saffu.settings, a fraction tag, a seed. The constraints are the rule's own: ``setting`` and
    ``seed`` are also wildcards of the generative study, over other values."""
    settings = "|".join(saffu_settings(config))
    return f"saffu/{{setting,{settings}}}/{{frac,f[0-9.]+}}/seed{{seed,\\d+}}/"


def token_files(config: dict[str, Any]) -> list[str]:
    """The token arrays and metadata of the corpus (data.corpus) every SAFFU job reads."""
    return [f"tokens/{config['data']['corpus']}/{name}" for name in TOKEN_FILES]


def job_inputs(config: dict[str, Any], setting: str, tag: str, seed: int) -> dict[str, list[str]]:
    """A job's inputs besides its code: the tokens, and the metrics of the job whose chosen rates
    it reuses (``rates_files``: later seeds reuse their first seed's, the other settings the
    main setting's on the full train split)."""
    return {"tokens": token_files(config), "rates": rates_files(config, setting, tag, seed)}


def job_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """The arguments of ``python -m pillm saffu`` for one job, from its Snakemake ``wildcards``
    (setting, frac, seed), ``input`` (tokens, rates) and ``output`` (metrics): the setting, its
    train fraction, the tokens' folder, ``saffu_job_params`` as JSON, the output folder and,
    for a job that reuses chosen rates, ``--rates-from``; ``--mps-bulk`` (``is_bulk``)."""
    params = saffu_job_params(config, wildcards.setting, int(wildcards.seed))
    cfg = json.dumps(params, sort_keys=True)
    rates = f" --rates-from {input.rates[0]}" if input.rates else ""
    job = (wildcards.setting, wildcards.frac, int(wildcards.seed))
    bulk = " --mps-bulk" if is_bulk(config, *job) else ""
    return (
        f"--setting {wildcards.setting} --fraction {saffu_fraction(config, wildcards.frac)}"
        f" --tokens-dir {os.path.dirname(input.tokens[0])} --params {shlex.quote(cfg)}"
        f" --out-dir {os.path.dirname(output.metrics)}{rates}{bulk}"
    )


def kn_params(config: dict[str, Any]) -> dict[str, Any]:
    """What the Kneser-Ney job reads: saffu.kn, and saffu.fractions and saffu.seeds for the train
    windows of the SAFFU runs."""
    saffu = config["saffu"]
    return {k: saffu[k] for k in ("kn", "fractions", "seeds")}


def aggregate_params(config: dict[str, Any]) -> dict[str, Any]:
    """What the aggregation reads: the setting names, the grid of expected runs
    (saffu.main_setting, inits, fractions, seeds, ablation_seeds) and lm.trained_margin (the
    held-out drop in nats that makes a cold start trained, as an LM run's training loss)."""
    saffu = config["saffu"]
    keys = ("main_setting", "inits", "fractions", "seeds", "ablation_seeds")
    return {"settings": list(saffu_settings(config)), **{k: saffu[k] for k in keys},
            "trained_margin": config["lm"]["trained_margin"]}  # fmt: skip


def tables_params(config: dict[str, Any]) -> dict[str, Any]:
    """What the tables and macros read: the saffu section without its settings (those come from
    the summary)."""
    return {k: v for k, v in config["saffu"].items() if k != "settings"}


def tables_args(config: dict[str, Any], input: Any, output: Any) -> str:
    """The arguments of ``python -m pillm saffu-tables`` from the rule's ``input`` (summary, lm,
    templates) and ``output`` (tables, numbers): the summary folder, the LM summary,
    ``tables_params`` as JSON, the templates' folder, the tables' folder and the macros file."""
    cfg = shlex.quote(json.dumps(tables_params(config), sort_keys=True))
    return (
        f"--summary-dir {os.path.dirname(input.summary)} --lm-summary {input.lm}"
        f" --params {cfg} --templates {os.path.dirname(input.templates[0])}"
        f" --tables-dir {os.path.dirname(output.tables[0])} --numbers {output.numbers}"
    )
