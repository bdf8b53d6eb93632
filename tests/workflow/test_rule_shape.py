"""The rules files stay thin: every rule at most MAX_RULE_LINES lines, logic in its wing's plan.

A rule's length counts its directive lines (input, output, params, shell, ...), from the
``rule`` line to the next top-level statement, blank lines and comments left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "workflow" / "rules"
MAX_RULE_LINES = 20


def rule_lengths() -> dict[str, int]:
    out: dict[str, int] = {}
    for path in sorted(RULES_DIR.glob("*.smk")):
        name = None
        for line in path.read_text().splitlines():
            if m := re.match(r"rule (\w+):", line):
                name = m[1]
                out[name] = 0
            elif line and not line[0].isspace() and not line.startswith("#"):
                name = None
            elif name and line.strip() and not line.strip().startswith("#"):
                out[name] += 1
    return out


LENGTHS = rule_lengths()


@pytest.mark.parametrize("rule", sorted(LENGTHS))
def test_rule_is_short(rule: str):
    assert LENGTHS[rule] <= MAX_RULE_LINES, (
        f"rule {rule} has {LENGTHS[rule]} lines (> {MAX_RULE_LINES}): move its logic to its "
        "wing's plan (pillm.<study>.plan) or common.smk's helpers"
    )


def benchmark_folders() -> dict[str, str]:
    """rule -> the first folder of its ``benchfile(...)`` path."""
    out: dict[str, str] = {}
    for path in sorted(RULES_DIR.glob("*.smk")):
        for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", path.read_text(), re.M):
            if m := re.search(r'benchfile\(\s*(?:f?"([^"/]+)/)', body):
                out[rule] = m[1]
    return out


def test_benchmark_files_lie_under_their_rule():
    """`pillm plan` and benchmarks/estimates.json read a job's rule from its benchmark file's
    first folder (pillm.estimate), so each rule's ``benchfile`` path starts with its name."""
    folders = benchmark_folders()
    assert {"run_lm", "solve_timing", "scaling_cost"} <= set(folders)
    # the two generative rules whose files pillm.estimate tells apart by their paths
    by_path = {"gen_classifier": "generative", "gen_lr_run": "generative"}
    assert {r: f for r, f in folders.items() if f != by_path.get(r, r)} == {}
