"""``pip install .`` gives a working pipeline: every third-party module ``src/pillm`` imports is a
dependency of ``pyproject.toml`` (or of one of its extras, for the optional paths: Triton on a
GPU, Inception FID online)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(folder: Path) -> set[str]:
    """Top-level names of every absolute import in the package's sources."""
    out = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def names(requirements: list[str]) -> set[str]:
    """The distribution names of requirement strings ("torch>=2.4" -> "torch")."""
    return {norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in requirements}


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def declared() -> set[str]:
    return names([*PROJECT["dependencies"], *sum(PROJECT["optional-dependencies"].values(), [])])


def test_every_imported_package_is_declared():
    dists = packages_distributions()
    third = imported_modules(ROOT / "src" / "pillm") - set(sys.stdlib_module_names) - {"pillm"}
    assert {"torch", "polars", "yaml"} <= third  # the scan sees the package's imports
    # a module not installed here is named by its import (pytorch_fid -> pytorch-fid)
    missing = {m: dists.get(m, [m]) for m in third
               if not {norm(d) for d in dists.get(m, [m])} & declared()}  # fmt: skip
    assert not missing, f"imported by src/pillm, not in pyproject.toml's dependencies: {missing}"


def test_the_lock_pins_every_runtime_dependency():
    """requirements.txt (what ./setup.sh installs, exactly as CI tested) pins each of them."""
    runtime = names(PROJECT["dependencies"])
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    pinned = {
        norm(line.split("==")[0]) for line in lines if "==" in line and not line.startswith("#")
    }
    assert runtime - pinned == set()
