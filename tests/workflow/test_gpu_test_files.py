"""The GPU host has torch but not polars, snakemake or datasets (docs/offline-gpu.md), and
benchmarks/gpu_run.sh runs `pytest -m gpu` on the files that hold GPU tests only: those files
and the conftest above them must import none of the missing packages at module level."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MISSING_ON_GPU_HOST = {"polars", "snakemake", "datasets"}


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages a module imports outside any function."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_gpu_test_files_import_only_what_the_gpu_host_has():
    files = [p for p in TESTS.rglob("test_*.py") if "mark.gpu" in p.read_text()]
    assert len(files) >= 8, files  # the fused kernels, trainer, PIL, SAFFU, generative, probe
    conftests = {c for f in files for c in [TESTS / "conftest.py", f.parent / "conftest.py"]}
    bad = {
        str(p.relative_to(TESTS)): sorted(top_level_imports(p) & MISSING_ON_GPU_HOST)
        for p in [*files, *(c for c in conftests if c.exists())]
    }
    assert {k: v for k, v in bad.items() if v} == {}
