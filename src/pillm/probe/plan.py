"""The probe study's plan, torch-free: its config checks, job list, result paths and the
parameters each of its rules forwards."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from typing import Any

from pillm.core.config import ConfigError
from pillm.data.check import split_bytes
from pillm.models.registry import (
    OWN_PREFIX,
    PYPI_MODELS,
    PYPI_POSITIONS,
    model_group,
    own_model_names,
)

JOB_DIR = "probe/{model}/{corpus}"  # one probe job's folder under the results tree
JOB_OUTPUTS = {
    "blocks": "blocks.parquet",
    "gradient": "gradient.parquet",
    "metrics": "metrics.json",
}
CORPUS_FILES = ("test.txt", "valid.txt", "meta.json")  # prepare_corpus's output of one corpus
# The paper's generated files under the results tree (common.smk's ``generated()``).
GENERATED = "paper/generated"
# probe.gradient keys the jobs do not read (the aggregation's rule for a trained map)
JOB_FREE = ("trained_gain",)
NUMBERS = f"{GENERATED}/probe_numbers.tex"  # the probe macros
TABLES = ("summary", "corpora", "gradient", "blocks", "masks", "cost")
FIGURES = ("probe_r2_depth", "probe_bilinear", "probe_feature_median", "probe_corpora",
           "probe_gradient", "probe_masks")  # fmt: skip


def check(config: dict[str, Any]) -> None:
    check_probe_models(config)
    check_windows(config)
    for key in ("cross_corpus_models", "max_blocks"):
        check_names_probed_models(config, key)


def check_names_probed_models(config: dict[str, Any], key: str) -> None:
    """probe.<key> (a list or a mapping by model) names models of probe.models."""
    probe = config["probe"]
    if extra := sorted(set(probe.get(key) or ()) - set(probe["models"])):
        raise ConfigError(
            f"probe.{key}: {extra} are not in probe.models {probe['models']}; "
            f"add them to probe.models or remove them from probe.{key}"
        )


def check_windows(config: dict[str, Any]) -> None:
    """Windows of ``probe.seq_len`` tokens fit every probed model and, where the split sizes
    are known before a job (pillm.data.split_bytes), at least two fit in each split read (test:
    the fit; valid: the swap); the excluded positions lie in a window; the fit batches leave
    some held out; swaps happen on probed corpora."""
    probe = config["probe"]
    seq_len = probe["seq_len"]
    limits = {"pillm": ("model.context", config["model"]["context"])}
    limits |= {m: (f"{m}'s positions", n) for m, n in PYPI_POSITIONS.items()}
    for model in probe["models"]:
        what, most = limits.get(model, (None, None))
        if most is not None and seq_len > most:
            raise ConfigError(
                f"probe.seq_len = {seq_len} exceeds {model}'s longest input ({what} = {most}): "
                "lower probe.seq_len"
            )
    if bad := [p for p in probe["rows"]["exclude_positions"] if not -seq_len <= p < seq_len]:
        raise ConfigError(
            f"probe.rows.exclude_positions: {bad} lie outside windows of probe.seq_len = "
            f"{seq_len} tokens; use positions in [-{seq_len}, {seq_len})"
        )
    batches = -(-probe["fit_windows"] // probe["batch_size"])
    if batches < probe["holdout_every"]:
        raise ConfigError(
            f"probe.fit_windows = {probe['fit_windows']} makes {batches} batch(es) of "
            f"probe.batch_size = {probe['batch_size']}, but every probe.holdout_every = "
            f"{probe['holdout_every']}th batch is held out, so none would be: raise "
            "probe.fit_windows or lower probe.batch_size or probe.holdout_every"
        )
    if extra := sorted(set(probe["swap_corpora"]) - set(probe["corpora"])):
        raise ConfigError(
            f"probe.swap_corpora: {extra} are not in probe.corpora {probe['corpora']}, so no "
            "job would swap on them; add them to probe.corpora or remove them"
        )
    for corpus in probe["corpora"]:
        sizes = split_bytes(config["data"], corpus) or {}
        splits = ("test", "valid") if corpus in probe["swap_corpora"] else ("test",)
        for split in (s for s in splits if s in sizes and sizes[s] < 2 * seq_len):
            raise ConfigError(
                f"probe.seq_len = {seq_len}: two windows do not fit in the {corpus} {split} "
                f"split ({sizes[split]:,} bytes, so at most that many tokens); lower "
                "probe.seq_len"
            )


def check_probe_models(config: dict[str, Any]) -> None:
    """probe.models names models the probe rule knows how to load."""

    probe = config["probe"]
    known = {"pillm", *PYPI_MODELS, *probe["hub_models"]}
    if unknown := sorted(set(probe["models"]) - known):
        raise ConfigError(
            f"probe.models: unknown {unknown}; known: {sorted(known)} (pillm = this config's "
            "baseline; hub ids go under probe.hub_models)."
        )
    if clash := sorted({"pillm", *PYPI_MODELS} & set(probe["hub_models"])):
        raise ConfigError(f"probe.hub_models: {clash} are reserved model names; rename them.")


def probe_model_names(config: dict[str, Any]) -> list[str]:
    """The probe jobs' model names (probe.models, pillm expanded per lm.seeds)."""
    return own_model_names(config["probe"]["models"], config["lm"]["seeds"])


def priority_class(model: str) -> str:
    """The start-priority class of a probe job (config/resources.yaml). A pretrained model's
    probe waits for no training and is the longest probe job (SmolLM2: 60-100 s on an H200
    shared with the build's other jobs, over an hour on two CPU cores): it starts early and runs
    beside the rest, so it does not end the build alone. The pipeline's own models' probes are
    short and wait for their training."""
    return "probe" if model.startswith(OWN_PREFIX) else "probe_pretrained"


def model_corpora(config: dict[str, Any], model: str) -> list[str]:
    """The corpora one probe model runs on: every corpus of probe.corpora for the models of
    probe.cross_corpus_models (null: every model), the main corpus alone for the others."""
    probe = config["probe"]
    cross = probe.get("cross_corpus_models")
    name = model_group(model)
    return list(probe["corpora"]) if cross is None or name in cross else [main_corpus(config)]


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every probe job (model-major, then probe.corpora)."""
    return [
        f"{JOB_DIR.format(model=m, corpus=c)}/{name}"
        for m in probe_model_names(config)
        for c in model_corpora(config, m)
    ]


# ---------------------------------------------------------------- the probe rule: one job


def job_inputs() -> dict[str, list[str]]:
    """A probe job's corpus files, with the ``corpus`` wildcard (a pipeline model's checkpoint
    and tokenizer come from common.smk's own_model_inputs)."""
    return {"corpus": [f"data/{{corpus}}/{name}" for name in CORPUS_FILES]}


def job_outputs() -> dict[str, str]:
    """A probe job's outputs by name, with the ``model`` and ``corpus`` wildcards."""
    return {key: f"{JOB_DIR}/{name}" for key, name in JOB_OUTPUTS.items()}


def job_params(config: dict[str, Any], model: str) -> dict[str, Any]:
    """The ``--params`` of a probe job of ``model`` (a model wildcard): the probe section without
    probe.models and probe.cross_corpus_models (which models run where is the DAG's business),
    and of probe.max_blocks only this model's entry (pillm: every seed), so that editing one
    model's entry reruns only its jobs (no key where the model has none), and probe.gradient
    without the keys only the aggregation reads (``JOB_FREE``)."""
    params = {
        k: v for k, v in config["probe"].items() if k not in ("models", "cross_corpus_models")
    }
    # the aggregation's threshold, not the job's: a new value must not rerun the probe jobs
    params["gradient"] = {k: v for k, v in params["gradient"].items() if k not in JOB_FREE}
    name, blocks = model_group(model), params.pop("max_blocks", None) or {}
    return params | ({"max_blocks": {name: blocks[name]}} if name in blocks else {})


def job_args(config: dict[str, Any]) -> Callable[[Any, Any, Any], str]:
    """The probe command's arguments, as a params function of a job's wildcards, input and
    output (Snakemake passes them by these names): ``--model``, ``--corpus``, ``--corpus-dir``
    (the folder of the corpus files), ``--params`` (``job_params`` of the job's model as
    JSON, shell-quoted),
    ``--checkpoint`` and ``--tokenizer`` where the job has them (the pipeline's own models) and
    ``--out-dir`` (the folder of the outputs)."""

    def args(wildcards: Any, input: Any, output: Any) -> str:
        params = shlex.quote(json.dumps(job_params(config, wildcards.model), sort_keys=True))
        own = ""
        if "checkpoint" in input.keys():  # noqa: SIM118 (a Snakemake Namedlist: `in` reads values)
            own = f" --checkpoint {input.checkpoint} --tokenizer {input.tokenizer}"
        return (
            f"--model {wildcards.model} --corpus {wildcards.corpus}"
            f" --corpus-dir {os.path.dirname(input.corpus[0])} --params {params}{own}"
            f" --out-dir {os.path.dirname(output.blocks)}"
        )

    return args


# ---------------------------------------------------------------- aggregation, tables, figures


def main_corpus(config: dict[str, Any]) -> str:
    """The corpus the summary leads with: the first swap corpus, else the first corpus."""
    probe = config["probe"]
    return (probe["swap_corpora"] or probe["corpora"])[0]


def aggregate_inputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """Every probe job's outputs, by the aggregation's flag (blocks, gradients, metrics)."""
    return {
        "blocks": job_files(config, JOB_OUTPUTS["blocks"]),
        "gradients": job_files(config, JOB_OUTPUTS["gradient"]),
        "metrics": job_files(config, JOB_OUTPUTS["metrics"]),
    }


def aggregate_params(config: dict[str, Any]) -> dict[str, Any]:
    """probe-aggregate's ``--params``: the main corpus of the claim frame, the bootstrap
    resamples of its interval, the fewest blocks per model a correlation's direction needs and
    probe.gradient.trained_gain (which gradient-trained maps trained)."""
    return {
        "main_corpus": main_corpus(config),
        "bootstrap_resamples": config["probe"]["bootstrap_resamples"],
        "min_blocks": config["probe"]["min_blocks"],
        "trained_gain": config["probe"]["gradient"]["trained_gain"],
    }


def table_params(config: dict[str, Any]) -> dict[str, Any]:
    """probe-tables' ``--params``: the config's name, the main corpus and the probe keys the
    tables and macros quote."""
    probe = config["probe"]
    keys = ("corpora", "swap_corpora", "bilinear_rank", "low_rank_factor", "holdout_every",
            "rows", "outlier_features", "bootstrap_resamples", "refit_resamples",
            "min_blocks", "hub_models")  # fmt: skip
    quoted = {k: probe[k] for k in keys}
    gain = {"grad_trained_gain": probe["gradient"]["trained_gain"]}
    return {"name": config["name"], "main_corpus": main_corpus(config), **quoted, **gain}


def table_files() -> list[str]:
    """The probe tables under the results tree."""
    return [f"{GENERATED}/tables/probe_{name}.tex" for name in TABLES]


def figure_files(ext: str) -> list[str]:
    """The probe figures under the results tree, as ``ext`` (pdf or png) files."""
    return [f"{GENERATED}/figures/{name}.{ext}" for name in FIGURES]
