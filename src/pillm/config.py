"""Config validation: stop before any job with a message that names the bad key and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    pass


def _key_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def validate_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise ConfigError listing every violation of the schema, each with its dotted key."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  - {_key_path(e)}: {e.message}" for e in errors]
        raise ConfigError(
            f"invalid config (checked against {schema_path}):\n"
            + "\n".join(lines)
            + "\nFix these keys in your config file (see config/README.md)."
        )


def check_variant_dependencies(config: dict[str, Any]) -> None:
    """Every variant a listed variant builds on must be listed too (its runs feed the tables)."""
    from .variants import dependencies

    listed = config["lm"]["variants"]
    missing = sorted({d for v in listed for d in dependencies(v)} - set(listed))
    if missing:
        raise ConfigError(
            f"lm.variants needs {missing}: listed variants build on them (src/pillm/variants.py). "
            "Add them to lm.variants."
        )


def check_probe_models(config: dict[str, Any]) -> None:
    """probe.models names models the probe rule knows how to load."""
    from .pretrained import PYPI_MODELS

    probe = config["probe"]
    known = {"pillm", *PYPI_MODELS, *probe["hub_models"]}
    if unknown := sorted(set(probe["models"]) - known):
        raise ConfigError(
            f"probe.models: unknown {unknown}; known: {sorted(known)} (pillm = this config's "
            "baseline; hub ids go under probe.hub_models)."
        )
    if clash := sorted({"pillm", *PYPI_MODELS} & set(probe["hub_models"])):
        raise ConfigError(f"probe.hub_models: {clash} are reserved model names; rename them.")
