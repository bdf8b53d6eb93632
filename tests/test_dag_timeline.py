"""benchmarks/dag_timeline.py: each job's start, end and fate from a Snakemake log;
benchmarks/job_cpu.py: each rule's wall and CPU seconds from the jobs' benchmark files."""

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Tests of a benchmark script: run in CI (`pytest -m bench`), not in the default selection.
pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[1]

LOG = """\
Building DAG of jobs...
[Fri Nov 27 08:00:00 2026]
localrule run_lm:
    input: results/paper/tokens/wikitext2/train.npy
    output: results/paper/lm/baseline/seed0/metrics.json, results/paper/lm/baseline/seed1/metrics.json
    jobid: 7
    threads: 2

[Fri Nov 27 08:00:10 2026]
rule saffu:
    output: results/paper/saffu/cat/f100/metrics.json
    jobid: 8

[Fri Nov 27 08:00:20 2026]
localrule probe:
    output: results/paper/probe/pillm-s0/wikitext2/blocks.parquet
    jobid: 9

[Fri Nov 27 08:00:40 2026]
Finished jobid: 7 (Rule: run_lm)
[Fri Nov 27 08:00:50 2026]
Error in rule probe:
    message: None
    jobid: 9
    output: results/paper/probe/pillm-s0/wikitext2/blocks.parquet
[Fri Nov 27 08:01:40 2026]
Error in rule saffu:
    jobid: 8
    output: results/paper/saffu/cat/f100/metrics.json
"""


def test_jobs_their_spans_and_fates(tmp_path):
    log = tmp_path / "call1.snakemake.log.gz"
    with gzip.open(log, "wt") as f:
        f.write(LOG)
    tsv = tmp_path / "jobs.tsv"
    out = subprocess.run([sys.executable, "benchmarks/dag_timeline.py", str(log), "--tsv",
                          str(tsv)], cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.splitlines()[0] == (
        "log 1: 100 s, 3 jobs started: 1 done, 1 failed, 1 interrupted, 0 still running; "
        "at most 3 at once, 1.6 on average"  # (40 + 90 + 30) / 100
    )
    rows = [r.split("\t") for r in tsv.read_text().splitlines()[1:]]
    assert rows == [
        ["1", "run_lm", "results/paper/lm/baseline/seed0/metrics.json", "0", "40", "done"],
        ["1", "saffu", "results/paper/saffu/cat/f100/metrics.json", "10", "100", "interrupted"],
        ["1", "probe", "results/paper/probe/pillm-s0/wikitext2/blocks.parquet", "20", "50",
         "failed"],
    ]  # fmt: skip


def test_snakemake9_error_lines_name_their_jobid(tmp_path):
    """Snakemake 9 writes "Error in rule saffu, jobid: 8" on one line."""
    log = tmp_path / "call1.snakemake.log"
    log.write_text(LOG.replace("Error in rule probe:\n    message: None\n    jobid: 9",
                               "Error in rule probe, jobid: 9")
                      .replace("Error in rule saffu:\n    jobid: 8", "Error in rule saffu, jobid: 8"))  # fmt: skip
    assert "Error in rule saffu, jobid: 8" in log.read_text()
    out = subprocess.run([sys.executable, "benchmarks/dag_timeline.py", str(log)], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "3 jobs started: 1 done, 1 failed, 1 interrupted, 0 still running" in out, out


def test_by_rule_sums_each_rules_walls(tmp_path):
    log = tmp_path / "call1.snakemake.log"
    log.write_text(LOG)
    out = subprocess.run([sys.executable, "benchmarks/dag_timeline.py", str(log), "--by-rule"],
                         cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
    lines = out.stdout.splitlines()[2:]  # after the call and total lines
    assert lines[0].split() == ["rule", "jobs", "sum", "of", "walls", "s", "longest", "s",
                                "last", "end", "s"]  # fmt: skip
    assert [line.split() for line in lines[1:]] == [
        ["saffu", "1", "90", "90", "100"],  # the most summed wall first
        ["run_lm", "1", "40", "40", "40"],
        ["probe", "1", "30", "30", "50"],
    ]


def test_job_cpu_sums_wall_and_cpu_seconds_by_rule(tmp_path):
    head = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for rel, wall, cpu in [("run_lm/baseline.tsv", 80.0, 60.0), ("run_lm/ffn_only.tsv", 20.0, 5.0),
                           ("generative/mnist/lr_flow/lr0.001.tsv", 10.0, 10.0)]:  # fmt: skip
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + f"{wall}\t0:01:00\t1\t1\t1\t1\t0\t0\t50\t{cpu}\n")
    out = subprocess.run([sys.executable, "benchmarks/job_cpu.py", str(tmp_path), "--wall", "50",
                          "--cores", "4"], cwd=REPO, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert re.search(r"^run_lm\s+2\s+100\s+65\s+0.65$", out, re.M), out
    assert re.search(r"^gen_lr_run\s+1\s+10\s+10\s+1.00$", out, re.M), out
    assert "mean CPU demand over the run's 50 s: 1.5 cores of 4 cores" in out
    empty = subprocess.run([sys.executable, "benchmarks/job_cpu.py", str(tmp_path / "none")],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert empty.returncode != 0 and "no benchmark .tsv files under" in empty.stderr


def test_gpu_power_averages_each_gpus_samples_per_window(tmp_path):
    log = tmp_path / "gpu_util.csv"
    lines = ["2026/11/28 04:25:00.489, 0, 0 %, 1024 MiB, 70.00 W, 345 MHz",
             "2026/11/28 04:25:00.500, 1, 50 %, 2048 MiB, 100.00 W, 1980 MHz",
             "2026/11/28 04:25:10.489, 0, 100 %, 3072 MiB, 650.00 W, 1980 MHz",
             "a line nvidia-smi printed that is not a sample",
             "2026/11/28 04:25:31.489, 0, 90 %, 2048 MiB, 600.00 W, 1980 MHz"]  # fmt: skip
    log.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "benchmarks/gpu_power.py", str(log), "--window", "30"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [["0", "0", "50", "2.0", "360", "1162"], ["0", "1", "50", "2.0", "100", "1980"],
                    ["30", "0", "90", "2.0", "600", "1980"]]  # fmt: skip
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    bad = subprocess.run([sys.executable, "benchmarks/gpu_power.py", str(empty)], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "no nvidia-smi samples in" in bad.stderr
