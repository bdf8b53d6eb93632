"""The LM study's plan, torch-free: its config checks, the config each run depends on, the
learning-rate x dropout sensitivity grid, and each rule's paths under the results tree and job
arguments (what ``workflow/rules/lm.smk`` and ``sensitivity.smk`` expand and pass)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pillm.core.config import ConfigError
from pillm.core.selection import check_extendable
from pillm.data.check import split_bytes
from pillm.lm import scaling
from pillm.lm.variants import VARIANTS, dependencies, lm_params


def patch_schema(schema: dict[str, Any]) -> None:
    """The variant names come from the registry (``pillm.lm.variants``), never a copy in the
    schema."""
    schema["properties"]["lm"]["properties"]["variants"]["items"]["enum"] = list(VARIANTS)


def check(config: dict[str, Any]) -> None:
    """What the schema cannot say about ``model``, ``lm``, ``pil``, ``sensitivity`` and
    ``scaling`` (``pillm.lm.scaling.check``)."""
    check_model(config)
    check_variant_dependencies(config)
    check_solve_grids(config)
    sensitivity_points(config)
    scaling.check(config)


def check_model(config: dict[str, Any]) -> None:
    """Heads split ``model.d_model`` evenly; a window of ``model.context`` tokens fits in every
    split of the corpus (where the split sizes are known before a job: pillm.data.split_bytes)."""
    d, h, context = (config["model"][k] for k in ("d_model", "n_head", "context"))
    if d % h:
        fits = [n for n in range(h, 0, -1) if d % n == 0][0]
        raise ConfigError(
            f"model.d_model = {d} is not divisible by model.n_head = {h} (each head takes "
            f"d_model / n_head dimensions): set model.n_head to a divisor of {d} (e.g. {fits}) "
            f"or model.d_model to a multiple of {h} (e.g. {h * max(1, round(d / h))})"
        )
    corpus = config["data"]["corpus"]
    sizes = split_bytes(config["data"], corpus) or {}
    for split, n_bytes in sizes.items():
        if n_bytes < context + 1:
            raise ConfigError(
                f"model.context = {context} does not fit in the {corpus} {split} split: it holds "
                f"{n_bytes:,} bytes, so at most that many tokens, and a window needs context + 1; "
                "lower model.context"
            )


def check_solve_grids(config: dict[str, Any]) -> None:
    """A solve grid that is extended past an edge (``pil.grid_extend``) has a ratio: two
    distinct positive values in ``pil.lambdas``, and in ``pil.fgrad_steps`` where a listed
    variant takes functional-gradient steps."""
    pil, listed = config["pil"], [VARIANTS[v] for v in config["lm"]["variants"]]
    if any(v.solves for v in listed):
        check_extendable(pil["lambdas"], pil["grid_extend"], "pil.lambdas", "pil.grid_extend")
    if any(v.target == "fgrad" for v in listed):
        check_extendable(
            pil["fgrad_steps"], pil["grid_extend"], "pil.fgrad_steps", "pil.grid_extend"
        )


def check_variant_dependencies(config: dict[str, Any]) -> None:
    """Every variant a listed variant builds on must be listed too (its runs feed the tables)."""

    listed = config["lm"]["variants"]
    missing = sorted({d for v in listed for d in dependencies(v)} - set(listed))
    if missing:
        raise ConfigError(
            f"lm.variants needs {missing}: listed variants build on them (pillm.lm.variants.VARIANTS). "
            "Add them to lm.variants."
        )


# ---- Sensitivity of the contribution share: a learning-rate x dropout grid -------------------


def sensitivity_point(lr: float, dropout: float) -> str:
    """The folder name of one grid point, e.g. ``lr0.001_do0.1``."""
    return f"lr{lr:g}_do{dropout:g}"


def sensitivity_points(config: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """point name -> (lr, dropout) over sensitivity.lrs x sensitivity.dropouts; ConfigError when
    the share's two arms (baseline, attn_only) are not both in sensitivity.variants."""
    sens = config["sensitivity"]
    if missing := sorted({"baseline", "attn_only"} - set(sens["variants"])):
        raise ConfigError(
            f"sensitivity.variants needs {missing}: the share compares baseline with attn_only"
        )
    points = {sensitivity_point(lr, do): (lr, do) for lr in sens["lrs"] for do in sens["dropouts"]}
    if len(points) != len(sens["lrs"]) * len(sens["dropouts"]):
        raise ConfigError(
            "sensitivity.lrs / sensitivity.dropouts: two values print alike with %g "
            f"({sorted(points)}); make them differ in their first 6 significant digits"
        )
    return points


def sensitivity_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(variant, point, seed) of every sensitivity run."""
    sens = config["sensitivity"]
    return [
        (v, point, seed)
        for v in sens["variants"]
        for point in sensitivity_points(config)
        for seed in sens["seeds"]
    ]


def sensitivity_params(config: dict[str, Any], variant: str, point: str) -> dict[str, Any]:
    """``run-lm --params`` of one grid point: the variant's own params with model.dropout and
    train.lr set to the point's values (everything else as in the main runs)."""
    lr, dropout = sensitivity_points(config)[point]
    cfg = lm_params(config, variant)
    return {
        **cfg,
        "model": {**cfg["model"], "dropout": dropout},
        "train": {**cfg["train"], "lr": lr},
    }


# ---- Paths under the results tree (what workflow/rules/lm.smk and sensitivity.smk expand) --------


def run_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every run of lm.variants x lm.seeds (variant-major)."""
    return [
        f"lm/{v}/seed{s}/{name}" for v in config["lm"]["variants"] for s in config["lm"]["seeds"]
    ]


def variant_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of one variant's runs, every lm.seeds (the ``{variant}`` wildcard kept)."""
    return [f"lm/{{variant}}/seed{s}/{name}" for s in config["lm"]["seeds"]]


def dependency_files(config: dict[str, Any], variant: str) -> dict[str, list[str]]:
    """The runs a variant builds on (every seed): ``dep_<variant>`` -> metrics and checkpoints."""
    seeds = config["lm"]["seeds"]
    return {
        f"dep_{d}": [f"lm/{d}/seed{s}/{f}" for s in seeds for f in ("metrics.json", "model.pt")]
        for d in dependencies(variant)
    }


def priority_class(config: dict[str, Any], variant: str) -> str:
    """The start-priority class of a variant's job (config/resources.yaml): variants others
    build on first, then those trained from scratch, then those built on another."""
    if variant in {d for v in config["lm"]["variants"] for d in dependencies(v)}:
        return "lm_built_on"
    return "lm_derived" if dependencies(variant) else "lm_scratch"


def gpu_mem_class(variant: str) -> str:
    """The GPU memory class of a variant's job (config/resources.yaml): the functional-gradient
    solve holds chunks of logits beside the model."""
    return "run_lm_fgrad" if VARIANTS[variant].target == "fgrad" else "run_lm"


def tokens_dir(config: dict[str, Any]) -> str:
    """The tokenized corpus (the tokenize rule's folder)."""
    return f"tokens/{config['data']['corpus']}"


def token_files(config: dict[str, Any]) -> list[str]:
    """The token splits and their meta.json: what a run reads."""
    return [
        f"{tokens_dir(config)}/{f}" for f in ("train.npy", "valid.npy", "test.npy", "meta.json")
    ]


def run_dirs(config: dict[str, Any], variant: str) -> list[str]:
    """The folder of each of a variant's runs, every lm.seeds."""
    return [f"lm/{variant}/seed{s}" for s in config["lm"]["seeds"]]


def run_inputs(config: dict[str, Any], variant: str) -> dict[str, list[str]]:
    """A variant's job reads the runs it builds on (``dependency_files``) and the tokens."""
    return {**dependency_files(config, variant), "tokens": token_files(config)}


def run_outputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """A variant's job writes, per run: metrics, training curve, solve records and checkpoint."""
    files = {"metrics": "metrics.json", "curve": "curve.parquet", "solve": "solve.parquet",
             "checkpoint": "model.pt"}  # fmt: skip
    return {key: variant_files(config, name) for key, name in files.items()}


def extras_inputs(config: dict[str, Any]) -> dict[str, list[str] | str]:
    """The lm_extras job of a variant reads its runs (metrics and checkpoints), the tokenizer
    and the train split (which LAMBADA targets it never contains)."""
    return {
        "metrics": variant_files(config, "metrics.json"),
        "checkpoints": variant_files(config, "model.pt"),
        "tokens": [f"{tokens_dir(config)}/{f}" for f in ("tokenizer.json", "train.npy")],
    }


def extras_outputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """Per run: LAMBADA records and generation samples."""
    return {key: variant_files(config, f"{key}.json") for key in ("extras", "samples")}


def extras_params(config: dict[str, Any]) -> dict[str, Any]:
    """``lm-extras --params`` (pillm.lm.config.ExtrasParams): the data, lambada and samples
    sections."""
    return {"data": config["data"], "lambada": config["lambada"], "samples": config["samples"]}


def aggregate_inputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """Every run's records, by kind (metrics holds the extras' tidy rows too)."""
    return {
        "metrics": run_files(config, "metrics.json") + run_files(config, "extras.json"),
        "curves": run_files(config, "curve.parquet"),
        "solves": run_files(config, "solve.parquet"),
        "samples": run_files(config, "samples.json"),
    }


def summary_files() -> dict[str, str]:
    """The summaries ``aggregate`` writes (pillm.lm.aggregate)."""
    return {
        **{k: f"summary/{k}.parquet" for k in ("runs", "lm", "curves", "solves", "samples")},
        "claims": "summary/claims/lm.parquet",
    }


def tables_inputs(config: dict[str, Any]) -> dict[str, str]:
    """What the tables read: summaries, the SAFFU study's Kneser-Ney summary (the n-gram row of
    the main and contribution tables) and the tokens' meta.json."""
    summary = summary_files()
    return {
        "runs": summary["runs"],
        "lm": summary["lm"],
        "samples": summary["samples"],
        "solves": summary["solves"],
        "kn": "summary/kneser_ney.parquet",
        "tokens_meta": f"{tokens_dir(config)}/meta.json",
    }


def aggregate_params(config: dict[str, Any]) -> dict[str, Any]:
    """``aggregate --params``: lm.variants, lm.seeds and lm.trained_margin (the training-loss
    drop, in nats, that makes a gradient-trained run count as trained)."""
    lm = config["lm"]
    return {
        "variants": lm["variants"],
        "seeds": lm["seeds"],
        "trained_margin": lm["trained_margin"],
    }


def tables_params(config: dict[str, Any]) -> dict[str, Any]:
    """``tables --params``: the config's name, model and train sections, lm.variants, lm.seeds
    and lm.trained_margin."""
    return {
        "name": config["name"],
        "model": config["model"],
        "train": config["train"],
        "variants": config["lm"]["variants"],
        "seeds": config["lm"]["seeds"],
        "trained_margin": config["lm"]["trained_margin"],
    }


# The variants a sensitivity job may run (the schema's sensitivity.variants): the {variant}
# wildcard of its paths matches only these.
SENSITIVITY_VARIANTS = ("baseline", "attn_only", "ffn_only")


def sensitivity_variant_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of one sensitivity job's runs (the ``{variant}`` wildcard, limited to
    SENSITIVITY_VARIANTS, and the ``{seed}`` wildcard kept)."""
    variant = f"{{variant,{'|'.join(SENSITIVITY_VARIANTS)}}}"
    seed = "{seed,[0-9]+}"
    return [f"sensitivity/{variant}/{p}/seed{seed}/{name}" for p in sensitivity_points(config)]


def sensitivity_outputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """A sensitivity job (a variant and a seed) writes, per grid point, what a run-lm run does."""
    files = {"metrics": "metrics.json", "curve": "curve.parquet", "solve": "solve.parquet",
             "checkpoint": "model.pt"}  # fmt: skip
    return {key: sensitivity_variant_files(config, name) for key, name in files.items()}


def sensitivity_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every sensitivity run."""
    return [f"sensitivity/{v}/{p}/seed{s}/{name}" for v, p, s in sensitivity_jobs(config)]


def sensitivity_report_inputs(config: dict[str, Any]) -> dict[str, list[str] | str]:
    """The sensitivity report reads every run's metrics and the tokens' meta.json."""
    return {
        "metrics": sensitivity_files(config, "metrics.json"),
        "tokens_meta": f"{tokens_dir(config)}/meta.json",
    }


def sensitivity_report_params(config: dict[str, Any]) -> dict[str, Any]:
    """``sensitivity --params``: the sensitivity section and ``lm.trained_margin``, the LM
    study's rule for which runs trained (pillm.lm.sensitivity)."""
    return {**config["sensitivity"], "trained_margin": config["lm"]["trained_margin"]}


def sensitivity_summaries() -> dict[str, str]:
    """The summaries the sensitivity report writes (pillm.lm.sensitivity)."""
    return {"summary": "summary/sensitivity.parquet", "runs": "summary/sensitivity_runs.parquet"}


# ---- Job arguments: what a GPU rule's shell passes to its command (paths under ``root``, the
# config's results tree; common.smk's gpu_shell adds --device and --threads) -----------------


def command_args(flags: dict[str, Any]) -> str:
    """``--flag value ...``, each word shell-quoted; a list gives one word per item (an empty
    list: the flag alone)."""
    words: list[str] = []
    for flag, value in flags.items():
        words += [flag, *map(str, value if isinstance(value, list) else [value])]
    return " ".join(map(shlex.quote, words))


def as_json(obj: Any) -> str:
    """A ``--params`` value: JSON with sorted keys (as workflow/rules/common.smk's as_json)."""
    return json.dumps(obj, sort_keys=True)


def run_args(config: dict[str, Any], variant: str, root: str) -> str:
    """``run-lm`` of one variant's job (after ``--variant``): every lm.seeds run in one process,
    with ``lm_params``, the tokens, the runs it builds on (``--deps VARIANT=DIR``, their folder of
    seed<k> runs) and one folder per seed."""
    return command_args({
        "--seeds": config["lm"]["seeds"],
        "--tokens-dir": f"{root}/{tokens_dir(config)}",
        "--deps": [f"{d}={root}/lm/{d}" for d in dependencies(variant)],
        "--params": as_json(lm_params(config, variant)),
        "--out-dirs": [f"{root}/{d}" for d in run_dirs(config, variant)],
    })  # fmt: skip


def extras_args(config: dict[str, Any], variant: str, root: str) -> str:
    """``lm-extras`` of one variant's job: its runs (every lm.seeds), the tokenizer's folder and
    ``extras_params``."""
    return command_args({
        "--run-dirs": [f"{root}/{d}" for d in run_dirs(config, variant)],
        "--tokens-dir": f"{root}/{tokens_dir(config)}",
        "--params": as_json(extras_params(config)),
    })  # fmt: skip


def sensitivity_args(config: dict[str, Any], variant: str, seed: int, root: str) -> str:
    """``run-lm`` of one sensitivity job (after ``--variant``): one seed of the variant over the
    whole grid in one process (``sensitivity_points``' order), one ``sensitivity_params`` set and
    one folder per run. A job per seed: the seeds run side by side on a GPU host."""
    grid = list(sensitivity_points(config))
    return command_args({
        "--seeds": [seed] * len(grid),
        "--tokens-dir": f"{root}/{tokens_dir(config)}",
        "--params": as_json([sensitivity_params(config, variant, p) for p in grid]),
        "--out-dirs": [f"{root}/sensitivity/{variant}/{p}/seed{seed}" for p in grid],
    })  # fmt: skip


def timing_params(config: dict[str, Any], alone: bool) -> dict[str, Any]:
    """``scaling-cost --params`` of the rule ``solve_timing``: the LM study's own model, training
    and solve settings at its one width, lm.timing_repeats times; ``alone`` when the rule keeps
    every other GPU job off the device (a CUDA host)."""
    model = config["model"]
    return {
        "model": model,
        "train": config["train"],
        "pil": config["pil"],
        "widths": [model["d_model"]],
        "head_dim": model["d_model"] // model["n_head"],
        "repeats": config["lm"]["timing_repeats"],
        "alone": alone,
    }
