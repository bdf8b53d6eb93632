"""The probe study's plan, torch-free: its config checks and job list."""

from __future__ import annotations

from typing import Any

from pillm.core.config import ConfigError
from pillm.models.registry import PYPI_MODELS, own_model_names


def check(config: dict[str, Any]) -> None:
    check_probe_models(config)


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


def job_files(config: dict[str, Any], name: str) -> list[str]:
    """File ``name`` of every probe job (model-major, then probe.corpora)."""
    corpora = config["probe"]["corpora"]
    return [f"probe/{m}/{c}/{name}" for m in probe_model_names(config) for c in corpora]
