"""The SST-2 adapter study's plan, torch-free: its job list, relative result paths and the
arguments its rules (workflow/rules/lora.smk) pass to ``python -m pillm``."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from pillm.core.config import ConfigError


def check(config: dict[str, Any]) -> None:
    lora_model_names(config)


def lora_model_names(config: dict[str, Any]) -> list[str]:
    """The SST-2 jobs' model names, ``<model>-s<seed>`` for every lora.models and lora.seeds:
    the seed draws the fit/dev subsets, W_down, LoRA's init and batch order, and for ``pillm``
    also picks the base model (``pillm-s<k>`` is this config's baseline of lm seed k)."""
    lora = config["lora"]
    missing = sorted(set(lora["seeds"]) - set(config["lm"]["seeds"]))
    if "pillm" in lora["models"] and missing:
        raise ConfigError(
            f"lora.seeds {missing} are not in lm.seeds {config['lm']['seeds']}: the pillm "
            "base model of lora seed k is the baseline of lm seed k; use lm seeds in "
            "lora.seeds or drop pillm from lora.models"
        )
    return [f"{m}-s{s}" for m in lora["models"] for s in lora["seeds"]]


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every SST-2 job (model-major, then lora.methods)."""
    methods = config["lora"]["methods"]
    return [f"lora/{m}/{k}/{name}" for m in lora_model_names(config) for k in methods]


def job_names(config: dict[str, Any]) -> list[str]:
    """``<model>/<method>`` of every SST-2 job, in ``job_files``' order: the jobs the
    aggregation expects (a missing one shows as a missing row)."""
    methods = config["lora"]["methods"]
    return [f"{m}/{k}" for m in lora_model_names(config) for k in methods]


# One job's folder under the results tree (wildcards: model, method).
JOB = "lora/{model}/{method}"
# The methods a job may run (pillm.lora.methods.METHODS, which imports torch).
METHODS = ("pil_lora", "ridge", "pil_adapter", "lora")


def job_folder() -> str:
    """``JOB`` with its method constrained to ``METHODS``, as the output of the ``lora`` rule."""
    return f"lora/{{model}}/{{method,{'|'.join(METHODS)}}}/"


def job_params(config: dict[str, Any]) -> dict[str, Any]:
    """What one job reads: the lora section without lora.models and lora.seeds (which jobs run
    is the DAG's business, not any one job's: a job's seed is in its model name), and the data
    section."""
    lora = {k: v for k, v in config["lora"].items() if k not in ("models", "seeds")}
    return {"lora": lora, "data": config["data"]}


def job_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """The arguments of ``python -m pillm lora`` for one job, from its Snakemake ``wildcards``
    (model, method), ``input`` (for the pipeline's own models: checkpoint, tokenizer) and
    ``output`` (metrics): the base model, the method, ``job_params`` as JSON, the own model's
    checkpoint and tokenizer, the output folder."""
    cfg = shlex.quote(json.dumps(job_params(config), sort_keys=True))
    own = (
        f"--checkpoint {input.checkpoint} --tokenizer {input.tokenizer}"
        if "checkpoint" in input.keys()  # noqa: SIM118 (a Namedlist: `in` looks at its files)
        else ""
    )
    return (
        f"--model {wildcards.model} --method {wildcards.method} --params {cfg} {own}"
        f" --out-dir {os.path.dirname(output.metrics)}"
    )
