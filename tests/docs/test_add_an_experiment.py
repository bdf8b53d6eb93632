"""docs/add-an-experiment.md, followed step by step in a copy of this checkout: every block the
page marks with a file is applied as it says, then Snakemake plans the new study's jobs and the
house's rules (test_layers, test_config_keys) hold. Seconds, no training."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import copy_worktree

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "add-an-experiment.md"
# A fenced block the page marks: ```lang {action=path}
BLOCK = re.compile(r"^```\w+ \{([a-z-]+)=([^}]+)\}\n(.*?)^```$", re.S | re.M)


def steps(text: str) -> list[tuple[str, str, str]]:
    """(action, path, content) of every marked block, in page order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


def apply(repo: Path, action: str, rel: str, content: str) -> None:
    """One step. file: create; append: add at the end; table-rows: add after the file's last
    table row; replace-line: each line replaces the line that starts with the same text up to
    its ' = '; insert-after: the block's first line is in the file, the rest goes after it."""
    path = repo / rel
    if action == "file":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        return
    lines = path.read_text().splitlines()
    new = content.rstrip("\n").splitlines()
    if action == "append":
        lines += new
    elif action == "table-rows":
        last = max(i for i, ln in enumerate(lines) if ln.startswith("|"))
        lines[last + 1 : last + 1] = new
    elif action == "replace-line":
        for ln in new:
            head = ln.split(" = ")[0] + " = "
            hits = [i for i, old in enumerate(lines) if old.startswith(head)]
            assert len(hits) == 1, f"{rel}: {len(hits)} lines start with {head!r}"
            lines[hits[0]] = ln
    elif action == "insert-after":
        hits = [i for i, old in enumerate(lines) if old == new[0]]
        assert len(hits) == 1, f"{rel}: the page's anchor line {new[0]!r} is not there once"
        lines[hits[0] + 1 : hits[0] + 1] = new[1:]
    else:
        raise AssertionError(f"the page uses an unknown action {action!r} for {rel}")
    path.write_text("\n".join(lines) + "\n")


def test_page_marks_every_kind_of_step():
    kinds = {(a, p) for a, p, _ in steps(PAGE.read_text())}
    for need in [("replace-line", "src/pillm/plan.py"), ("insert-after", "Snakefile"),
                 ("file", "workflow/rules/toy.smk"), ("file", "paper/claims/toy.yaml"),
                 ("append", "config/schema.yaml"), ("table-rows", "config/README.md")]:  # fmt: skip
        assert need in kinds, f"docs/add-an-experiment.md lost its step {need}"


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory) -> Path:
    repo = copy_worktree(tmp_path_factory.mktemp("toy"))
    for action, rel, content in steps(PAGE.read_text()):
        apply(repo, action, rel, content)
    return repo


def run(repo: Path, *cmd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_snakemake_plans_the_new_study(toy_repo, tmp_path):
    out = run(toy_repo, sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile",
              "config/smoke.yaml", "-d", str(tmp_path))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    counts = dict(re.findall(r"^(toy\w*)\s+(\d+)$", out.stdout, re.M))
    assert counts == {"toy": "2", "toy_aggregate": "1", "toy_tables": "1"}, out.stdout[-3000:]
    # the claims rule, the paper and the results page take the new wing's outputs
    for rule, path in (("claims", "summary/claims/toy.parquet"), ("arxiv", "tables/toy.tex"),
                       ("results_page", "tables/toy.tex")):  # fmt: skip
        block = out.stdout.split(f"rule {rule}:")[1].split("\nrule ")[0]
        assert path in block, f"rule {rule} does not read {path}"


def test_the_command_line_has_its_rows(toy_repo):
    out = run(toy_repo, sys.executable, "-m", "pillm", "--help")
    assert out.returncode == 0, out.stderr
    assert all(c in out.stdout for c in ("toy", "toy-aggregate", "toy-tables"))


def test_the_house_rules_hold_for_the_new_wing(toy_repo):
    out = run(toy_repo, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
              "tests/workflow/test_layers.py", "tests/workflow/test_config_keys.py")  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert "toy" in run(toy_repo, sys.executable, "-c",
                        "from pillm.plan import STUDIES; print(STUDIES)").stdout  # fmt: skip
