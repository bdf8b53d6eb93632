"""The LM study's plan, torch-free: its config checks, the config each run depends on, and the
learning-rate x dropout sensitivity grid (what ``workflow/rules/lm.smk`` and
``sensitivity.smk`` expand)."""

from __future__ import annotations

from typing import Any

from pillm.core.config import ConfigError
from pillm.lm.variants import VARIANTS, dependencies


def patch_schema(schema: dict[str, Any]) -> None:
    """The variant names come from the registry (``pillm.lm.variants``), never a copy in the
    schema."""
    schema["properties"]["lm"]["properties"]["variants"]["items"]["enum"] = list(VARIANTS)


def check(config: dict[str, Any]) -> None:
    """What the schema cannot say about ``lm`` and ``sensitivity``."""
    check_variant_dependencies(config)
    sensitivity_points(config)


def check_variant_dependencies(config: dict[str, Any]) -> None:
    """Every variant a listed variant builds on must be listed too (its runs feed the tables)."""

    listed = config["lm"]["variants"]
    missing = sorted({d for v in listed for d in dependencies(v)} - set(listed))
    if missing:
        raise ConfigError(
            f"lm.variants needs {missing}: listed variants build on them (pillm.lm.variants.VARIANTS). "
            "Add them to lm.variants."
        )


def lm_params(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """Config one LM run depends on: the solve settings only for variants that solve."""
    cfg = {"model": config["model"], "train": config["train"]}
    if VARIANTS[variant].solves:
        cfg["pil"] = config["pil"]
    return cfg


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


def sensitivity_grid(config: dict[str, Any]) -> list[tuple[str, int]]:
    """(point, seed) of one sensitivity variant's runs, in the order its job runs them."""
    seeds = config["sensitivity"]["seeds"]
    return [(p, s) for p in sensitivity_points(config) for s in seeds]


def sensitivity_variant_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of one sensitivity variant's runs (the ``{variant}`` wildcard kept)."""
    return [f"sensitivity/{{variant}}/{p}/seed{s}/{name}" for p, s in sensitivity_grid(config)]


def sensitivity_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every sensitivity run."""
    return [f"sensitivity/{v}/{p}/seed{s}/{name}" for v, p, s in sensitivity_jobs(config)]
