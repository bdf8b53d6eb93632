"""The centre of the plan, torch-free: the registry of studies and the one config check.

Each study is a wing, ``pillm.<study>``: its ``config.py`` (typed sections), ``plan.py`` (its
checks, job lists and per-job params), ``commands.py`` (its CLI rows), its rules file
``workflow/rules/<study>.smk`` and its claims ``paper/claims/<study>.yaml``. Adding a study is a
folder, a line in ``STUDIES`` and an ``include:`` in the Snakefile. Bad config stops here,
before any job, with a message that names the key and the fix.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from pillm.core.config import ConfigError, apply_schema, load_schema, validate_config
from pillm.data import check_data_config

STUDIES = ("lm", "probe", "generative", "lora", "saffu")


def study_plan(name: str) -> ModuleType:
    """``pillm.<name>.plan``: its ``check(config)``, and ``patch_schema(schema)`` where the
    study's registry fills part of the schema."""
    return importlib.import_module(f"pillm.{name}.plan")


def schema(schema_path: str | Path) -> dict[str, Any]:
    """``config/schema.yaml`` with each study's patches (e.g. the LM variant names)."""
    loaded = load_schema(schema_path)
    for name in STUDIES:
        patch = getattr(study_plan(name), "patch_schema", None)
        if patch is not None:
            patch(loaded)
    return loaded


def validate(config: dict[str, Any], schema_path: str | Path) -> None:
    """ConfigError listing every key the (patched) schema rejects."""
    validate_config(config, schema(schema_path), schema_path)


TEX = ("latexmk", "pdflatex")
TEX_INSTALL = (
    "apt-get install texlive-latex-base texlive-latex-recommended texlive-latex-extra "
    "texlive-fonts-recommended latexmk (./setup.sh does it where it runs as root)"
)


def tex_found() -> bool:
    """Whether latexmk and pdflatex are on PATH."""
    return all(shutil.which(t) for t in TEX)


def builds_pdf(config: dict[str, Any]) -> bool:
    """Whether this run builds the PDF and the arXiv tarball (config key ``pdf``); ConfigError
    for ``pdf: true`` without TeX."""
    if config["pdf"] is True and not tex_found():
        raise ConfigError(f"pdf: true, but {' and '.join(TEX)} are not on PATH: {TEX_INSTALL}; "
                          "or set pdf: auto to build everything else")  # fmt: skip
    return config["pdf"] is True or (config["pdf"] == "auto" and tex_found())


def check_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Every config check, once, before any job: overrides typed and defaults filled
    (apply_schema), the schema, then what a schema cannot say, study by study."""
    apply_schema(config, schema_path)
    validate(config, schema_path)
    builds_pdf(config)
    check_data_config(config["data"])
    for name in STUDIES:
        study_plan(name).check(config)
