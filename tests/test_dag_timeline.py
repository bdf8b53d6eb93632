"""benchmarks/dag_timeline.py: each job's start, end and fate from a Snakemake log;
benchmarks/job_cpu.py: each rule's wall and CPU seconds from the jobs' benchmark files."""

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
        "call 1: 100 s, 3 jobs started: 1 done, 1 failed, 1 interrupted, 0 still running; "
        "at most 3 at once, 1.6 on average"  # (40 + 90 + 30) / 100
    )
    rows = [r.split("\t") for r in tsv.read_text().splitlines()[1:]]
    assert rows == [
        ["1", "run_lm", "results/paper/lm/baseline/seed0/metrics.json", "0", "40", "done"],
        ["1", "saffu", "results/paper/saffu/cat/f100/metrics.json", "10", "100", "interrupted"],
        ["1", "probe", "results/paper/probe/pillm-s0/wikitext2/blocks.parquet", "20", "50",
         "failed"],
    ]  # fmt: skip


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


PMON = """\
#Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
#HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %    name
 08:00:00       0          -     -      -      -      -      -      -      -    -
 08:00:01       0        101     C     50     20      -      -      -      -    python
 08:00:01       0        102     C     10      5      -      -      -      -    python
 08:00:01       0        103   M+C      -      -      -      -      -      -    python
 08:00:01       0        999     C     90     90      -      -      -      -    nvidia-cuda-mps
 08:00:02       0        101     C     70     40      -      -      -      -    python
 08:00:02       0        103   M+C     30     10      -      -      -      -    python
"""

PIDS = """\
101 python -m pillm run-lm --variant baseline --params '{"a": 1}' --out-dirs results/paper/lm/baseline/seed0 results/paper/lm/baseline/seed1
102 python -m pillm lm-extras --run-dirs results/paper/lm/baseline/seed0 --device auto
101 python -m pillm something-else --out-dir results/paper/saffu/cat/f100
103 python -m pillm saffu --out-dir results/paper/saffu/cat/f100 --device auto
"""

TIMELINE = """\
call\trule\toutput\tstart_s\tend_s\tstatus
1\trun_lm\tresults/paper/lm/baseline/seed0/metrics.json\t0\t40\tdone
1\tlm_extras\tresults/paper/lm/baseline/seed0/extras.json\t40\t50\tdone
1\tsaffu\tresults/paper/saffu/cat/f100/metrics.json\t10\t100\tdone
"""


def test_gpu_share_sums_each_jobs_busy_samples(tmp_path):
    """Each process is the job its command's output names, of the rule its command names where
    two jobs share an output folder; the first command line seen for a pid counts; samples of
    processes no job claims (the MPS server) are counted apart; '-' rows are no sample."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import gpu_share
    finally:
        sys.path.pop(0)
    for name, text in (("pmon.txt", PMON), ("pids.txt", PIDS), ("timeline.tsv", TIMELINE)):
        (tmp_path / name).write_text(text)
    by_rule, by_job, unclaimed = gpu_share.shares(
        tmp_path / "pmon.txt", tmp_path / "pids.txt", tmp_path / "timeline.tsv"
    )
    assert by_rule == {
        "run_lm": [1, 2, 1.2, 0.6],
        "lm_extras": [1, 1, 0.1, 0.05],
        "saffu": [1, 1, 0.3, 0.1],
    }
    assert by_job[("saffu", "results/paper/saffu/cat/f100/metrics.json")][2] == 0.3
    assert unclaimed == 1
    out = subprocess.run([sys.executable, "benchmarks/gpu_share.py", "--pmon",
                          str(tmp_path / "pmon.txt"), "--pids", str(tmp_path / "pids.txt"),
                          "--timeline", str(tmp_path / "timeline.tsv")],
                         cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.splitlines()[1].split()[:4] == ["run_lm", "1", "2", "1.2"]
    assert "most samples are of processes no job claims" not in out.stdout
    # An MPS build: the server holds nearly every sample, a job one second before it joined.
    mps = PMON + "".join(f" 08:00:{s:02d}       0        999     C     90     90      -      -"
                         "      -      -    nvidia-cuda-mps\n" for s in range(3, 12))  # fmt: skip
    (tmp_path / "pmon.txt").write_text(mps)
    out = subprocess.run([sys.executable, "benchmarks/gpu_share.py", "--pmon",
                          str(tmp_path / "pmon.txt"), "--pids", str(tmp_path / "pids.txt"),
                          "--timeline", str(tmp_path / "timeline.tsv")],
                         cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
    assert "most samples are of processes no job claims (10 against 4)" in out.stdout


DRY_RUN = """\
Building DAG of jobs...
[Sat Nov 28 09:56:23 2026]
rule tokenize:
    input: data/train.txt
    output: tokens/train.npy
    jobid: 1
    priority: 0
    resources: tmpdir=/tmp

[Sat Nov 28 09:56:23 2026]
rule run_lm:
    input: tokens/train.npy
    output: lm/a/metrics.json, lm/a/model.pt
    jobid: 2
    priority: 1
    threads: 2
    resources: tmpdir=/tmp, gpu=1, gpu_mem_mb=8000

[Sat Nov 28 09:56:23 2026]
rule run_lm:
    input: tokens/train.npy
    output: lm/b/metrics.json
    jobid: 3
    priority: 2
    threads: 2
    resources: tmpdir=/tmp, gpu=1, gpu_mem_mb=8000

[Sat Nov 28 09:56:23 2026]
rule probe:
    input: lm/a/model.pt
    output: probe/a.parquet
    jobid: 4
    priority: 0
    threads: 2
    resources: tmpdir=/tmp, gpu=1, gpu_mem_mb=2000
"""

WALLS = """\
call\trule\toutput\tstart_s\tend_s\tstatus
1\ttokenize\ttokens/train.npy\t0\t5\tdone
1\trun_lm\tlm/a/metrics.json\t5\t25\tdone
1\trun_lm\tlm/b/metrics.json\t5\t15\tdone
1\tprobe\tprobe/a.parquet\t25\t35\tdone
"""


def test_dag_schedule_replays_the_greedy_order(tmp_path):
    """One slot: the higher priority goes first (b, then a, then a's probe); two slots: a and b
    at once; memory for one job at a time serialises them again; a rule's priority can be
    overridden; the bounds are the GPU walls over the slots and the longest chain."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import dag_schedule
    finally:
        sys.path.pop(0)
    (tmp_path / "dry.txt").write_text(DRY_RUN)
    (tmp_path / "walls.tsv").write_text(WALLS)
    jobs = dag_schedule.read_dry_run(tmp_path / "dry.txt")
    assert [j.rule for j in jobs] == ["tokenize", "run_lm", "run_lm", "probe"]
    assert jobs[1].outputs == ["lm/a/metrics.json", "lm/a/model.pt"] and jobs[1].threads == 2
    assert jobs[0].gpu == 0 and jobs[3].gpu_mem == 2000
    assert dag_schedule.add_walls(jobs, tmp_path / "walls.tsv") == 4
    end, start = dag_schedule.replay(jobs, gpus=1, gpu_mem=1e9, cores=8)
    assert (end, start) == (45.0, [0.0, 15.0, 5.0, 35.0])
    assert dag_schedule.replay(jobs, 1, 1e9, 8, {"run_lm": 0})[1][1] == 5.0  # ties: dry run order
    assert dag_schedule.replay(jobs, gpus=2, gpu_mem=1e9, cores=8)[0] == 35.0
    assert dag_schedule.replay(jobs, gpus=2, gpu_mem=9000, cores=8)[0] == 45.0
    assert dag_schedule.critical_path(jobs) == 35.0
    with pytest.raises(ValueError, match="no job can start"):
        dag_schedule.replay(jobs, gpus=2, gpu_mem=1000, cores=8)
    out = subprocess.run([sys.executable, "benchmarks/dag_schedule.py", str(tmp_path / "dry.txt"),
                          str(tmp_path / "walls.tsv"), "--gpus", "1", "--priority", "run_lm=9"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "replayed at the dry run's priorities: 45 s" in out
    assert "bounds: the GPU jobs' walls over 1 slots 40 s; the longest chain" in out


ALONE_LOG = """\
Building DAG of jobs...
[Fri Nov 27 09:00:02 2026]
rule generative:
    output: results/paper/generative/mnist/diff_adamw/seed0/metrics.json
    jobid: 3

[Fri Nov 27 09:00:06 2026]
Finished jobid: 3 (Rule: generative)
[Fri Nov 27 09:00:06 2026]
rule saffu:
    output: results/paper/saffu/cat/f100/seed1/metrics.json
    jobid: 4

[Fri Nov 27 09:00:10 2026]
Finished jobid: 4 (Rule: saffu)
"""


def test_alone_ledger_attributes_busy_seconds_and_extrapolates_by_family(tmp_path):
    """benchmarks/alone_ledger.py: each alone job's GPU-busy seconds are nvidia-smi's busy
    shares over its wall (its start and end from the Snakemake log); over a shared DAG a later seed takes
    its own family's measurement, or its arm's first seed's, and an unmatched job of a measured
    rule only gets the rule's mean in the estimate column."""
    run = tmp_path / "alone"
    run.mkdir()
    (run / "snakemake.log").write_text(ALONE_LOG)
    # 09:00:00-09:00:11, one sample a second: 50 % busy during the first job, 100 % during the second
    busy = [0, 0, 50, 50, 50, 50, 100, 100, 100, 100, 0, 0]
    (run / "gpu_util.csv").write_text("".join(
        f"2026/11/27 09:00:{s:02d}.500, 0, {b} %, 100 MiB, {100 + b} W, 1980 MHz\n"
        for s, b in enumerate(busy)))  # fmt: skip
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import alone_ledger
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    jobs = {m.rule: m for m in alone_ledger.measure(run)}
    assert (jobs["generative"].wall, jobs["generative"].busy) == (4, 2.0)
    assert (jobs["saffu"].busy, jobs["saffu"].watts) == (4.0, 200)
    shared = tmp_path / "shared.tsv"
    rows = [("generative", "results/paper/generative/mnist/diff_adamw/seed2/metrics.json"),
            ("generative", "results/paper/generative/mnist/flow_pil/seed0/metrics.json"),
            ("saffu", "results/paper/saffu/cat/f100/seed2/metrics.json"),
            ("probe", "results/paper/probe/pillm-s0/wikitext2/blocks.parquet")]  # fmt: skip
    shared.write_text("call\trule\toutput\tstart_s\tend_s\tstatus\n" + "".join(
        f"1\t{rule}\t{o}\t0\t10\tdone\n" for rule, o in rows))  # fmt: skip
    ledger = {r["rule"]: r for r in alone_ledger.extrapolate(list(jobs.values()), shared)}
    gen = ledger["generative"]
    assert (gen["jobs"], gen["matched"], gen["via_seed0"]) == (2, 1, 1)
    assert (gen["busy"], gen["estimated"]) == (2.0, 2.0)  # flow_pil: the rule's mean, marked
    assert (ledger["saffu"]["matched"], ledger["saffu"]["busy"]) == (1, 4.0)  # seed2 ~ seed1
    assert (ledger["probe"]["matched"], ledger["probe"]["estimated"]) == (0, 0.0)  # not measured
    assert alone_ledger.family("a/lr_diff/runs/lr0.003.json") == "a/lr_diff/runs/lr*.json"
