"""Code dependencies by import closure: what a command runs, and a fingerprint that ignores
comments and docstrings (fast: no workflow, no torch)."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pillm import codedeps
from pillm.cli import BY_NAME, COMMANDS, command

REPO = Path(__file__).resolve().parents[2]


def rel(paths: list[Path], root: Path = codedeps.PACKAGE_DIR) -> set[str]:
    return {p.relative_to(root).as_posix() for p in paths}


def imports_torch_at_import_time(path: Path) -> bool:
    """Does importing this module import torch (a top-level import, not one inside a function)?"""
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n.split(".")[0] == "torch" for n in names):
            return True
    return False


def test_run_lm_closure_reaches_deep_modules_and_the_cli():
    files = rel(codedeps.closure("run-lm"))
    assert {"lm/train_step.py", "lm/kernels/linear_ce.py", "core/ridge.py", "lm/run.py"} <= files
    assert {"__init__.py", "lm/__init__.py", "__main__.py", "cli.py", "plan.py"} <= files
    assert not files & {"probe/report.py", "lora/run.py", "saffu/run.py", "saffu/model.py"}


def test_function_level_imports_count():
    # lm/pil.py imports pillm.models.evaluate inside a function only
    assert "pillm.models.evaluate" in codedeps.imports("pillm.lm.pil")


def test_probe_tables_closure_imports_no_torch():
    files = codedeps.closure("probe-tables")
    assert "probe/report.py" in rel(files)
    assert not [p for p in files if imports_torch_at_import_time(p)]
    code = (
        "import sys; from pillm.cli import command, _resolve; "
        "_resolve(command('probe-tables').target); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_command_target_is_defined_in_its_module():
    for c in COMMANDS:
        path = codedeps.module_path(c.module)
        assert path is not None, c.target
        defined = set()
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.ImportFrom):  # an entry kept importable where it was
                defined |= {a.asname or a.name for a in n.names}
        assert c.target.split(":")[1] in defined, c.target


def test_every_rule_stamps_the_code_of_the_command_it_runs():
    ran_by_rules = set()
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        text = smk.read_text()
        # a rules file may name a job's shell once (NAME = gpu_shell("python -m pillm ..."))
        named = dict(re.findall(r'(?m)^([A-Z_]+) = \w+\(\s*"python -m pillm ([a-z0-9-]+)', text))
        for block in re.split(r"(?m)^rule ", text)[1:]:
            shell = block.split("shell:", 1)[-1].split()[0] if "shell:" in block else ""
            ran = re.findall(r"python -m pillm ([a-z0-9-]+)", block) or (
                [named[shell]] if shell in named else []
            )
            if not ran:
                continue
            ran_by_rules.add(ran[0])
            assert len(ran) == 1 and ran[0] in BY_NAME, block.split(":")[0]
            assert "src(" not in block
    # rule=False: commands people run by hand (pillm diff); several rules may run one command
    assert ran_by_rules == {c.name for c in COMMANDS if c.rule}
    # each job reads the stamp of the command it runs (written out or through a helper)
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--cores", "1",
         "--configfile", "config/smoke.yaml"], cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    for block in re.split(r"(?m)^(?:local)?rule ", out.stdout)[1:]:
        if cmd := re.search(r"python -m pillm ([a-z0-9-]+)", block):
            inputs = re.search(r"^\s+input: (.*)$", block, re.M)
            assert inputs and f"/code/{cmd[1]}/" in inputs[1], block.split(":")[0]


def test_unknown_command_names_the_known_ones():
    with pytest.raises(KeyError, match="run-lm"):
        command("run-llm")


@pytest.fixture
def package(tmp_path) -> Path:
    """A copy of src/pillm to edit."""
    root = tmp_path / "pillm"
    shutil.copytree(codedeps.PACKAGE_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_fingerprint_ignores_comments_and_docstrings_not_code(package):
    before = {n: codedeps.fingerprint(n, package) for n in ("run-lm", "probe-tables")}
    ce = package / "lm/kernels/linear_ce.py"
    first_def = re.search(r"(?m)^def \w+\(", ce.read_text()).group(0)
    edit(ce, first_def, f"# a comment\n{first_def}")
    edit(ce, '"""', '"""Reworded docstring. ')
    ridge = package / "core/ridge.py"
    edit(ridge, "\n", "\n# top comment\n")
    assert codedeps.fingerprint("run-lm", package) == before["run-lm"]

    edit(ce, first_def, f"UNUSED = 1\n\n\n{first_def}")
    assert codedeps.fingerprint("run-lm", package) != before["run-lm"]
    assert codedeps.fingerprint("probe-tables", package) == before["probe-tables"]


def test_stamp_path_and_mtime_move_only_with_the_code(package, tmp_path):
    stamps = tmp_path / "code"
    first = Path(codedeps.stamp("run-lm", stamps, package))
    mtime = first.stat().st_mtime_ns
    assert first.read_text().split("\n")[0].startswith(first.stem)
    assert "lm/kernels/linear_ce.py" in first.read_text()

    ridge = package / "core/ridge.py"
    original = ridge.read_text()
    ridge.write_text(original + "\n# only a comment\n")
    assert Path(codedeps.stamp("run-lm", stamps, package)) == first
    assert first.stat().st_mtime_ns == mtime

    ridge.write_text(original + "\nUNUSED = 2\n")
    second = Path(codedeps.stamp("run-lm", stamps, package))
    assert second != first and second.exists()

    ridge.write_text(original)  # reverting the edit returns to the old stamp, untouched
    os.utime(ridge)
    assert Path(codedeps.stamp("run-lm", stamps, package)) == first
    assert first.stat().st_mtime_ns == mtime



def test_config_stamp_path_moves_only_with_the_config(tmp_path):
    first = Path(codedeps.config_stamp("lora", '{"max_steps": 40}', tmp_path))
    mtime = first.stat().st_mtime_ns
    assert first.read_text() == '{"max_steps": 40}\n' and first.parent.name == "lora"
    assert Path(codedeps.config_stamp("lora", '{"max_steps": 40}', tmp_path)) == first
    second = Path(codedeps.config_stamp("lora", '{"max_steps": 30}', tmp_path))
    assert second != first and second.exists()
    # reverting the edit returns to the old stamp, untouched
    assert Path(codedeps.config_stamp("lora", '{"max_steps": 40}', tmp_path)) == first
    assert first.stat().st_mtime_ns == mtime


def test_fingerprint_text_is_the_same_under_every_python():
    """Stamps made on the GPU host (Python 3.12) must match this machine's: a field that a newer
    Python adds empty (3.12's ``type_params=[]`` on every def) does not enter the fingerprint."""
    import ast

    from pillm.codedeps import canonical

    tree = ast.parse("def f(x):\n    return x + 1\n")
    before = canonical(tree)
    tree.body[0].type_params = []  # what 3.12's parser sets
    tree.body[0]._fields = (*tree.body[0]._fields, "type_params")
    assert canonical(tree) == before
    assert canonical(ast.parse("def f(x):\n    return x + 2\n")) != before


def test_canonical_without_docstrings_leaves_the_shared_tree_alone():
    """The fingerprint reads the tree ``imports`` walked (one parse per file): it writes it
    without docstrings, a body of only a docstring as ``pass``, and edits nothing in it."""
    import ast

    from pillm.codedeps import canonical

    src = '"""Module."""\nclass A:\n    """Class."""\n    def f(self):\n        """Only this."""\n'
    tree = ast.parse(src)
    with_docs = canonical(tree)
    assert canonical(tree, docstrings=False) == canonical(
        ast.parse("class A:\n    def f(self):\n        pass\n")
    )
    assert canonical(tree) == with_docs == canonical(ast.parse(src))
    assert "Only this." in with_docs


def test_file_facts_are_kept_by_content_and_recomputed_when_unreadable(
    package, tmp_path, monkeypatch
):
    """A file's fingerprint and imports are read back from the facts folder by the hash of its
    bytes (so another checkout with the same file reads them too); an unreadable entry is
    computed again; "0" keeps none."""
    folder = tmp_path / "facts"
    monkeypatch.setenv(codedeps.FACTS_ENV, str(folder))
    codedeps._facts.cache_clear()
    want = codedeps.fingerprint("run-lm", package)
    entries = sorted(folder.rglob("*.json"))
    assert len(entries) == len({p.read_bytes() for p in codedeps.closure("run-lm", package)})
    ridge = package / "core/ridge.py"
    entry = next(
        e for e in entries if '"fingerprint": "' + codedeps.file_fingerprint(ridge) in e.read_text()
    )
    entry.write_text('{"fingerprint": "stale", "imports": []}')  # read back, not recomputed
    codedeps._facts.cache_clear()
    assert codedeps.file_fingerprint(ridge) == "stale"
    entry.write_text("{not json")
    codedeps._facts.cache_clear()
    assert codedeps.fingerprint("run-lm", package) == want
    monkeypatch.setenv(codedeps.FACTS_ENV, "0")
    assert codedeps.facts_dir() is None
    shutil.rmtree(folder)
    codedeps._facts.cache_clear()
    assert codedeps.fingerprint("run-lm", package) == want and not folder.exists()
    codedeps._facts.cache_clear()
