"""Which config owns ``results/<name>/``: two configs with the same ``name`` never share a tree.

The first run of a config records the config file that named it in ``results/<name>/.owner.json``;
a later run whose ``name`` comes from a different file stops before any job, naming both files.
The same file with ``--config`` overrides is the same owner (overrides tweak a config, they do not
make a new one). Torch-free: the Snakefile imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from pillm.core.config import ConfigError
from pillm.core.records import write_text

MARKER = ".owner.json"


def _display(path: str) -> str:
    real = os.path.realpath(path)
    rel = os.path.relpath(real)
    return real if rel.startswith("..") else rel


def claimant(configfiles: list, name: str) -> str:
    """The config file that set ``name`` (the last one that sets it), else ``--config``."""
    for path in reversed([str(p) for p in configfiles]):
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError:
            continue
        if isinstance(data, dict) and data.get("name") == name:
            return _display(path)
    return f"--config name={name}"


def recorded(results: str) -> str | None:
    marker = Path(results, MARKER)
    return json.loads(marker.read_text())["config"] if marker.is_file() else None


def check(results: str, config: str) -> None:
    """ConfigError when ``results`` belongs to another config file."""
    owner = recorded(results)
    if owner is not None and owner != config:
        raise ConfigError(
            f"name: {Path(results).name!r} is taken: {results}/ holds the results of {owner}, and "
            f"{config} has the same name. Give {config} its own `name:`, or, to hand the folder "
            f"over, delete {results}/{MARKER} (or the whole {results}/)."
        )


def claim(results: str, config: str) -> None:
    """Record ``config`` as the owner of ``results`` (at the start of a run, not a dry run)."""
    check(results, config)
    Path(results).mkdir(parents=True, exist_ok=True)
    write_text(Path(results, MARKER), json.dumps({"config": config}) + "\n")
