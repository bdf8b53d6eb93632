"""The SST-2 adapter study's plan, torch-free: its job list, relative result paths and the
arguments its rules (workflow/rules/lora.smk) pass to ``python -m pillm``."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from typing import Any

from pillm.core.config import ConfigError
from pillm.data.sst2 import GLUE_SIZES
from pillm.models.registry import OWN_PREFIX, PYPI_POSITIONS

# Keys of the lora section that configs written for an earlier release may hold, each with the
# key that replaced it and how to set it (``pillm.plan.check_retired`` names the fix; the schema
# alone would call the key unexpected and stop there).
RETIRED = {
    "trained_margin": "it was replaced by lora.trained_alpha: a LoRA run counts as trained when "
    "its kept weights' loss on the fit sentences lies below chance and their accuracy there "
    "beats the majority-class rate at a one-sided binomial test, p < lora.trained_alpha (a fixed "
    "loss margin cannot be met where the features support little more than the majority "
    "class). Delete lora.trained_margin and set lora.trained_alpha, e.g. 1.0e-3",
}


def check(config: dict[str, Any]) -> None:
    """What the schema cannot say: pillm's seeds are lm seeds, the subsets fit in GLUE train,
    inputs fit each base model, and a grid that is extended has a ratio."""
    lora_model_names(config)
    lora = config["lora"]
    rows = GLUE_SIZES["train"]  # every source has them (pillm.data.sst2.load_sst2 checks)
    if lora["n_dev"] >= rows or lora["n_train"] + lora["n_dev"] > rows:
        raise ConfigError(
            f"lora.n_train + lora.n_dev = {lora['n_train']} + {lora['n_dev']} exceeds the "
            f"{rows:,} rows of SST-2's GLUE train split they are drawn from: lower lora.n_train "
            "(0 takes every row not in the dev split) or lora.n_dev"
        )
    context = config["model"]["context"]
    if "pillm" in lora["models"] and lora["max_len"] > context:
        raise ConfigError(
            f"lora.max_len = {lora['max_len']} exceeds the pillm base model's context "
            f"(model.context = {context}): lower lora.max_len, or drop pillm from lora.models"
        )
    if "minilm" in lora["models"] and lora["max_len"] > PYPI_POSITIONS["minilm"]:
        raise ConfigError(
            f"lora.max_len = {lora['max_len']} exceeds MiniLM's {PYPI_POSITIONS['minilm']} "
            "positions: lower lora.max_len"
        )
    if lora["lr_extend"] and "lora" in lora["methods"] and len(set(lora["lrs"])) < 2:
        raise ConfigError(
            f"lora.lrs = {lora['lrs']}: extending it past an edge (lora.lr_extend = "
            f"{lora['lr_extend']}) needs two distinct rates (their ratio is the step); add "
            "one, or set lora.lr_extend: 0"
        )


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


def _params_arg(config: dict[str, Any]) -> str:
    """``job_params`` as one shell-quoted JSON argument (the lora and lora-rate jobs' --params)."""
    return shlex.quote(json.dumps(job_params(config), sort_keys=True))


def _own_args(input: Any) -> str:
    """The pipeline's own model's checkpoint and tokenizer flags (none for a pretrained one)."""
    if "checkpoint" not in input.keys():  # noqa: SIM118 (a Namedlist: `in` looks at its files)
        return ""
    return f"--checkpoint {input.checkpoint} --tokenizer {input.tokenizer}"


def job_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """The arguments of ``python -m pillm lora`` for one job, from its Snakemake ``wildcards``
    (model, method), ``input`` (for the pipeline's own models: checkpoint, tokenizer; for LoRA:
    its rate files) and ``output`` (metrics): the base model, the method, ``job_params`` as
    JSON, the own model's checkpoint and tokenizer, the rate files, the output folder."""
    cfg = _params_arg(config)
    rates = input.rates if "rates" in input.keys() else []  # noqa: SIM118
    rates = " ".join([rates] if isinstance(rates, str) else rates)  # one file: a str
    return (
        f"--model {wildcards.model} --method {wildcards.method} --params {cfg} {_own_args(input)}"
        f"{f' --rates {rates}' if rates else ''} --out-dir {os.path.dirname(output.metrics)}"
    )


def priority_class(model: str, method: str) -> str:
    """The start-priority class of an SST-2 job (config/resources.yaml): LoRA's (and its rate
    jobs') among the longest; a pretrained model's closed-form fit waits for no training and
    is not short (15-22 s on two CPU cores, a model load and the validation sentences through
    MiniLM), so it starts before the short jobs instead of ending the build; the pipeline's own
    model's closed-form fits are the shortest and wait for its training."""
    if method == "lora":
        return "lora_gradient"
    return "lora_head" if model.startswith(OWN_PREFIX) else "lora_head_pretrained"


# One rate of LoRA's search (rule lora_rate; wildcards model, lr): its file and its job's name.
RATE = "lora/{model}/lora/rates/lr{lr}.pt"
RATE_JOB = "lora_rate/{model}/lr{lr}"


def rate_name(lr: float) -> str:
    """A rate as its file names it: the shortest text that reads back as the same float."""
    return repr(float(lr))


def rate_files(config: dict[str, Any], model: str, method: str = "lora") -> list[str]:
    """The rate files a model's job of ``method`` reads: for LoRA one per rate of lora.lrs (its
    extensions past an edge pick run inside that job); none for the other methods."""
    lora = config["lora"]
    if method != "lora" or "lora" not in lora["methods"]:
        return []
    return [RATE.format(model=model, lr=rate_name(lr)) for lr in dict.fromkeys(lora["lrs"])]


def rate_inputs(config: dict[str, Any]) -> Callable[[Any], dict[str, list[str]]]:
    """The ``lora`` rule's rate files by wildcards (model, method): ``{"rates": rate_files}``."""
    return lambda w: {"rates": rate_files(config, w.model, w.method)}


def rate_args(config: dict[str, Any], wildcards: Any, input: Any, output: Any) -> str:
    """The arguments of ``python -m pillm lora-rate`` for one rate of one model's search."""
    cfg = _params_arg(config)
    return (
        f"--model {wildcards.model} --lr {wildcards.lr} --params {cfg} {_own_args(input)}"
        f" --out {output[0]}"
    )
