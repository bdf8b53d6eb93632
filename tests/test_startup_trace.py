"""benchmarks/startup_trace.py (a sitecustomize that profiles every ``python -m pillm`` process)
and benchmarks/startup_report.py (the per-process table read from its files)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_traced_pillm_process_writes_its_profile_and_the_report_counts_compile_time(tmp_path):
    site, prof = tmp_path / "site", tmp_path / "prof"
    site.mkdir()
    prof.mkdir()
    shutil.copy(REPO / "benchmarks/startup_trace.py", site / "sitecustomize.py")
    pycache = tmp_path / "pycache"  # empty: every module imported compiles from source
    env = {**os.environ, "PILLM_CPROFILE_DIR": str(prof), "PYTHONPYCACHEPREFIX": str(pycache),
           "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "src")])}  # fmt: skip
    subprocess.run([sys.executable, "-m", "pillm", "--help"], env=env, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    # a Python process that is not a pillm command is not traced
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=60)
    (meta,) = prof.glob("*.json")
    info = json.loads(meta.read_text())
    assert "pillm" in info["argv"] and info["end"] >= info["start"]
    assert meta.with_suffix(".prof").stat().st_size > 0
    out = subprocess.run([sys.executable, "benchmarks/startup_report.py", str(prof)], cwd=REPO,
                         check=True, capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    header, row = out.strip().splitlines()
    assert header.split()[:4] == ["start_s", "end_s", "wall_s", "compile_s"]
    start, end, wall, compile_s = (float(v) for v in row.split()[:4])
    assert start == 0.0 and end == wall > 0
    assert 0 < compile_s < wall  # the empty bytecode cache made it compile pillm's modules
    assert "--help" in row
