"""The house's shape, read from the source (AST): studies are wings over a ground floor.

- A study (``pillm.<study>`` for each name in ``pillm.plan.STUDIES``) imports the ground floor,
  never another study.
- The ground floor (``core``, ``accel``, ``models``, ``data``, ``paper``) imports no study and
  not the centre (``pillm.plan``, ``pillm.cli``, ...).
- No import cycles between modules (lazy, function-level imports included).
- No module over 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pillm.plan import STUDIES

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pillm"
GROUND = ("core", "accel", "models", "data", "paper")
MAX_LINES = 400


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The pillm modules a file imports anywhere in its body (``from a import b``: ``a.b`` when
    that is a module, else ``a``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pillm")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pillm"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m in MODULES}


GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def area(module: str) -> str:
    """``lm`` for ``pillm.lm.run``; ``centre`` for a top-level module such as ``pillm.plan``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in (*STUDIES, *GROUND)) \
        else "centre"  # fmt: skip


def test_studies_import_no_other_study():
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if area(m) in STUDIES
        for d in deps
        if area(d) in STUDIES and area(d) != area(m)
    )
    assert not bad, "a study imports another study (move the shared piece to core/):\n" + "\n".join(
        bad
    )


def test_ground_floor_imports_no_study_nor_centre():
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if area(m) in GROUND
        for d in deps
        if area(d) in STUDIES or area(d) == "centre"
    )
    assert not bad, "the ground floor imports a study or the centre:\n" + "\n".join(bad)


def test_no_import_cycles():
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(GRAPH[m]):
            if d == m or d.startswith(m + ".") or m.startswith(d + "."):
                continue  # itself, or a package and its own modules
            if state.get(d) == 1:
                cycles.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in GRAPH:
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def lines(name: str) -> int:
    return len(MODULES[name].read_text().splitlines())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name: str):
    n = lines(name)
    assert n <= MAX_LINES, f"{MODULES[name]} has {n} lines (> {MAX_LINES}): split it by concept"


def test_every_study_is_a_wing():
    """Each registered study has the wing's modules and its rules file."""
    root = PACKAGE.parents[1]
    for study in STUDIES:
        for part in ("config", "plan", "commands"):
            assert (PACKAGE / study / f"{part}.py").is_file(), f"pillm/{study}/{part}.py missing"
        assert (root / "workflow" / "rules" / f"{study}.smk").is_file(), study
