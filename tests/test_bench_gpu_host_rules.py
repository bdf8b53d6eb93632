"""The GPU scripts (benchmarks/gpu_run.sh, gpu_readme_command.sh) run the paper DAG on an
offline host without polars, leaving out gpu_env.sh's SUMMARY_RULES and what follows them: every
rule left to run must import its command without polars, else that job fails on the host and
Snakemake starts no further job."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import copy_worktree

pytestmark = pytest.mark.bench
ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = re.compile(r'^SUMMARY_RULES="([^"]*)"', re.M)


def summary_rules() -> list[str]:
    text = (ROOT / "benchmarks" / "gpu_env.sh").read_text()
    words = [w for m in ASSIGNMENT.finditer(text) for w in m.group(1).split()]
    return [w for w in words if w != "$SUMMARY_RULES"]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A copy of the checkout: a dry run writes code stamps and the owner marker of
    results/paper/, which stay out of the developer's own results."""
    return copy_worktree(tmp_path_factory.mktemp("clone"))


def host_rule_commands(omit: list[str], cwd: Path) -> dict[str, str]:
    """rule -> pillm command of every job a dry run of the paper config in ``cwd`` runs without
    ``omit``."""
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "4", "--configfile",
         "config/config.yaml", "--omit-from", *omit],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    commands, rule = {}, None
    for line in done.stdout.splitlines():
        if m := re.match(r"rule (\w+):", line):
            rule = m.group(1)
        elif rule and (m := re.search(r"python -m pillm ([a-z0-9-]+)", line)):
            commands.setdefault(rule, m.group(1))
    return commands


def needing_polars(commands: dict[str, str]) -> list[str]:
    """The rules whose command's module fails to import with polars hidden."""
    code = (
        "import sys, json\nsys.modules['polars'] = None\nfrom pillm import cli\nbad = []\n"
        f"for rule, name in {sorted(commands.items())!r}:\n"
        "    try:\n        cli._resolve(cli.command(name).target)\n"
        "    except ImportError:\n        bad.append(rule)\nprint(json.dumps(bad))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_rule_the_gpu_host_runs_imports_without_polars(clone):
    omit = summary_rules()
    assert "aggregate" in omit and "scaling_report" in omit, omit
    commands = host_rule_commands(omit, clone)
    assert {"run_lm", "generative", "scaling_point", "probe", "lora", "saffu"} <= set(commands)
    assert needing_polars(commands) == [], (
        "these rules need polars, which the GPU host lacks: add them to SUMMARY_RULES in "
        "benchmarks/gpu_env.sh"
    )


def test_the_check_names_a_rule_left_off_the_list(clone):
    """Without scaling_report the host would run it and the figures that read its summary."""
    omit = [r for r in summary_rules() if r != "scaling_report"]
    assert needing_polars(host_rule_commands(omit, clone)) == ["scaling_figures", "scaling_report"]
