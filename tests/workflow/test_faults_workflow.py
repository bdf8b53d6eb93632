"""Faults at the workflow level: a second ``snakemake`` in a checkout where one runs stops at
Snakemake's lock with a clear message; a job killed by SIGTERM leaves nothing that looks
finished, Snakemake reports it, and the next run redoes it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGET = "results/smoke/data/mirror.json"  # the cheapest job of the smoke config


def test_a_second_snakemake_stops_at_the_lock(tmp_path):
    """The first run's lock (Snakemake writes the files it will create under .snakemake/locks)
    stops a second run that would write them, before any job, with Snakemake's message."""
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text(f"{TARGET}\n")
    (locks / "0.input.lock").write_text("")
    cmd = [sys.executable, "-m", "snakemake", TARGET, "--cores", "1", "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
           str(REPO / "config/smoke.yaml")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Directory cannot be locked" in out, out[-3000:]
    assert "--unlock" in out  # the message says what to do after a crash
    assert not (tmp_path / TARGET).exists()


# A job that writes its output through pillm's atomic write and pauses mid-write (PAUSE s),
# run as ``python -m pillm`` runs (its __main__, so its signal handling).
JOB = r"""
import os, runpy, sys, time
import pillm.core.records as records
import pillm.data.sources as sources

def mirror_job(source, local_dir, out, revisions=None):
    with records.atomic_path(out) as tmp:
        with open(tmp, "w") as fh:
            fh.write('{"source": ')
            fh.flush()
            open("job.pid", "w").write(str(os.getpid()))
            time.sleep(float(os.environ["PAUSE"]))
            fh.write('"local"}\n')

sources.mirror_job = mirror_job
sys.argv = ["pillm", "mirror", "--params", '{"source": "local"}', "--out", sys.argv[1]]
runpy.run_module("pillm", run_name="__main__", alter_sys=True)
"""
SNAKEFILE = """
rule all:
    input: "out/data.json"

rule job:
    output: "out/data.json"
    log: "out/job.log"
    shell: "PAUSE={config[pause]} {python} job.py {output} > {log} 2>&1"
"""


def snakemake(work: Path, pause: float, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--config", f"pause={pause}"]
    return subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)  # fmt: skip


@pytest.mark.workflow
def test_a_job_killed_mid_write_is_redone(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "Snakefile").write_text(SNAKEFILE.replace("{python}", sys.executable))
    first = snakemake(tmp_path, pause=60)
    deadline = time.monotonic() + 120
    while not (tmp_path / "job.pid").exists():
        assert time.monotonic() < deadline and first.poll() is None, first.stdout.read()
        time.sleep(0.2)
    time.sleep(0.2)
    os.kill(int((tmp_path / "job.pid").read_text()), signal.SIGTERM)
    log = first.communicate(timeout=120)[0]
    assert first.returncode != 0 and "Error in rule job" in log, log[-3000:]
    out = tmp_path / "out"
    assert not (out / "data.json").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config",
                          "pause=0"], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert "Missing output files: out/data.json" in dry.stdout + dry.stderr
    rerun = snakemake(tmp_path, pause=0)
    log = rerun.communicate(timeout=120)[0]
    assert rerun.returncode == 0, log[-3000:]
    assert (out / "data.json").read_text() == '{"source": "local"}\n'
