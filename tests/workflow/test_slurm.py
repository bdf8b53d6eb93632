"""The workflow on a real SLURM through workflow/profiles/slurm, against a local run.

tests/slurm/cluster.sh starts a single-node cluster on 127.0.0.1 (munged, slurmctld, slurmd, no
accounting, so job status comes from squeue). A cheap part of the smoke DAG (data, tokenizer,
baseline LM seed 0 with its extras, the aggregate summary) runs once locally and once through
SLURM, in two copies of the repository; the metrics must be identical (CPU, same config and
seed), timings aside. Then a job killed by ``scancel`` must be reported, leave none of its
outputs, and be rerun by the next invocation.

The ``slurm``-marked tests need root and Debian's ``slurm-wlm`` and ``munge``; they fail (never
skip) when SLURM cannot start. They are not in the default selection (pyproject addopts); run them
with ``python -m pytest -m slurm tests/workflow/test_slurm.py``. The profile's dry runs need no cluster and
run by default.
"""

import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..conftest import REPO, copy_worktree

slurm = pytest.mark.slurm  # the tests that start a cluster; the profile's dry runs need none
CLUSTER = REPO / "tests/slurm/cluster.sh"
SUMMARY = "results/smoke/summary/lm.parquet"
RUN = "results/smoke/lm/baseline/seed0"
RUN_OUTPUTS = ["metrics.json", "curve.parquet", "solve.parquet", "model.pt"]
# Measured, not computed: these differ between any two runs.
TIMING = r"(_time_s|_seconds|tokens_per_s|peak_memory_mb)$"
# The test node's CPUs: GPU rules ask for min(4, cores) threads; status checks every few seconds.
SLURM_ARGS = [
    "--workflow-profile",
    "workflow/profiles/slurm",
    "--cores",
    "2",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "2",
]


def snakemake(repo: Path, *args: str, env=None, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["snakemake", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def clone(root: Path) -> Path:
    """A copy of the working tree beside a shared/data link, with the test configs."""
    repo = copy_worktree(root)
    cfg = yaml.safe_load((repo / "config/smoke.yaml").read_text())
    cfg["lm"]["variants"] = ["baseline"]
    (repo / "config/subset.yaml").write_text(yaml.safe_dump(cfg))
    # The same run made slow enough to be killed mid-training.
    cfg["train"].update(epochs=50, max_steps=100000)
    (repo / "config/slow.yaml").write_text(yaml.safe_dump(cfg))
    return repo


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Environment of a running single-node SLURM; stopped after the module."""
    state = tmp_path_factory.mktemp("slurm")
    start = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state)], capture_output=True, text=True, timeout=300
    )
    if start.returncode != 0:
        pytest.fail(
            f"the test SLURM cluster did not start ({CLUSTER.relative_to(REPO)}):\n"
            f"{start.stdout}{start.stderr}\nIt needs root and `apt-get install slurm-wlm munge`."
        )
    exported = dict(re.findall(r"^export (\w+)=(.*)$", (state / "env.sh").read_text(), re.M))
    env = {
        **os.environ,
        "SLURM_CONF": exported["SLURM_CONF"],
        "PATH": f"{state / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PILLM_SLURM_PARTITION": "",
        "PILLM_SLURM_ACCOUNT": "",
        "PILLM_SLURM_GPUS": "0",  # the test node has no GPUs
        "PILLM_SLURM_GPU_MEM_MB": "4000",  # nor need it have 16 GB
    }
    yield env
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120)


@pytest.fixture(scope="module")
def local_repo(tmp_path_factory) -> Path:
    repo = clone(tmp_path_factory.mktemp("local"))
    snakemake(repo, SUMMARY, "--cores", "2", "--configfile", "config/subset.yaml")
    return repo


@pytest.fixture(scope="module")
def slurm_repo(tmp_path_factory, cluster):
    """The same targets through SLURM; first without the CPU-only override of the GPU mapping."""
    repo = clone(tmp_path_factory.mktemp("slurm_clone"))
    gpu_env = {**cluster, "PILLM_SLURM_GPUS": "1"}
    gpu_try = snakemake(
        repo, SUMMARY, *SLURM_ARGS, "--configfile", "config/subset.yaml", env=gpu_env, check=False
    )
    run = snakemake(repo, SUMMARY, *SLURM_ARGS, "--configfile", "config/subset.yaml", env=cluster)
    return repo, gpu_try, run


def job_resources(*args: str, gpus: str) -> dict[str, set[str]]:
    """Rule -> the resource strings of its jobs in a dry run of the whole DAG through the profile."""
    env = {**os.environ, "PILLM_SLURM_GPUS": gpus, "PILLM_SLURM_GPU_MEM_MB": "16000"}
    out = snakemake(
        REPO, "-n", "--forceall", "--workflow-profile", "workflow/profiles/slurm", *args, env=env
    ).stdout
    jobs: dict[str, set[str]] = {}
    for rule, resources in re.findall(
        r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", out, re.M
    ):
        jobs.setdefault(rule, set()).add(resources)
    return jobs


@pytest.mark.parametrize("gpus", ["1", "0"])
def test_profile_gives_every_gpu_rule_its_gpus_and_the_rest_defaults(gpus):
    """Every rule that declares gpu=1 (found in workflow/rules/*.smk by the profile) asks SLURM for
    PILLM_SLURM_GPUS GPUs, 2 h and 16 GB; the other rules get the default 30 min and 4 GB."""
    jobs = job_resources("--configfile", "config/smoke.yaml", gpus=gpus)
    declared = set()
    for smk in (REPO / "workflow/rules").glob("*.smk"):
        for block in re.split(r"^rule ", smk.read_text(), flags=re.M)[1:]:
            if re.search(r"^\s+gpu=1", block, re.M):
                declared.add(block.split(":", 1)[0])
    assert {"run_lm", "lm_extras", "probe"} <= declared & set(jobs)
    for rule, resources in jobs.items():
        for res in resources:
            if rule in declared:
                assert f"gpu={gpus}" in res and "runtime=120" in res, (rule, res)
                assert "mem_mb=16000" in res, (rule, res)
            elif rule != "pdf":
                assert "gpu=" not in res and "runtime=30" in res, (rule, res)


def comparable(repo: Path) -> dict:
    """What a run computed (values, curves, samples, tokens), without timings and provenance."""
    import polars as pl

    summary = repo / "results/smoke/summary"
    keep = ~pl.col("metric").str.contains(TIMING)
    runs = pl.read_parquet(summary / "runs.parquet").filter(keep)
    lm = pl.read_parquet(summary / "lm.parquet").filter(keep)
    curves = pl.read_parquet(summary / "curves.parquet")
    samples = pl.read_parquet(summary / "samples.parquet")
    tokens = repo / "results/smoke/tokens/wikitext2"
    return {
        "runs": runs.select("variant", "seed", "metric", "value").sort("variant", "metric"),
        "lm": lm.select("variant", "metric", "mean", "n").sort("variant", "metric"),
        "curves": curves.select("step", "lr", "tokens", "train_loss", "val_loss").sort("step"),
        "samples": samples.select("prompt", "continuation").sort("prompt"),
        "tokens": {s: np.load(tokens / f"{s}.npy") for s in ("train", "valid", "test")},
    }


def run_values(repo: Path) -> dict[str, float]:
    import json

    rows = json.loads((repo / RUN / "metrics.json").read_text())
    return {r["metric"]: r["value"] for r in rows if not re.search(TIMING, r["metric"])}


@slurm
def test_profile_reads_status_from_squeue_without_accounting(cluster, monkeypatch):
    import yte

    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, cluster[key])
    with open(REPO / "workflow/profiles/slurm/config.yaml") as fh:
        profile = yte.process_yaml(fh, require_use_yte=True)
    assert profile["slurm-status-command"] == "squeue"
    assert profile["executor"] == "slurm"


@slurm
def test_gpu_rules_ask_slurm_for_a_gpu(slurm_repo):
    """Without PILLM_SLURM_GPUS=0, run_lm goes to sbatch with --gpus=1, which a node without
    GPUs refuses: the failure names the rule and the sbatch call."""
    _, gpu_try, _ = slurm_repo
    out = gpu_try.stdout + gpu_try.stderr
    assert gpu_try.returncode != 0
    assert re.search(r"Error in rule run_lm:.*SLURM sbatch failed", out, re.S)
    assert "--gpus=1" in out
    assert "has been submitted with SLURM jobid" in out  # the CPU rules before it ran


@slurm
def test_slurm_run_matches_local_run(local_repo, slurm_repo):
    from polars.testing import assert_frame_equal

    repo, gpu_try, run = slurm_repo
    out = (
        gpu_try.stdout + gpu_try.stderr + run.stdout + run.stderr
    )  # data and tokens ran in the first
    for rule in ("prepare_corpus", "tokenize", "run_lm", "lm_extras", "aggregate"):
        assert re.search(rf"rule {rule}:.*?submitted with SLURM jobid \d+", out, re.S), rule
    local, remote = comparable(local_repo), comparable(repo)
    assert {"test_ppl", "val_loss", "lambada_acc"} <= set(local["runs"]["metric"])
    for key in ("runs", "lm", "curves", "samples"):
        assert_frame_equal(local[key], remote[key], check_exact=True)
    for split, arr in local["tokens"].items():
        assert np.array_equal(arr, remote["tokens"][split]), split


def squeue_job(env: dict, comment_prefix: str) -> tuple[str, str] | None:
    """(job id, state) of the latest job whose comment (rule_<name>...) starts with the prefix."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--format=%i|%T|%k"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobs = [line.split("|", 2) for line in out.splitlines()]
    matching = [
        (int(jobid), state) for jobid, state, comment in jobs if comment.startswith(comment_prefix)
    ]
    if not matching:
        return None
    jobid, state = max(matching)
    return str(jobid), state


@slurm
def test_scancel_is_reported_leaves_nothing_finished_and_reruns(local_repo, slurm_repo, cluster):
    """Last: it reruns the LM job of the SLURM copy (to the same metrics)."""
    repo = slurm_repo[0]
    target = f"{RUN}/metrics.json"
    log = repo / "slow_run.log"
    train_log = repo / "results/smoke/logs/run_lm/baseline.log"
    args = [target, *SLURM_ARGS, "--configfile", "config/slow.yaml"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["snakemake", *args], cwd=repo, env=cluster, stdout=fh, stderr=subprocess.STDOUT
        )
    try:
        deadline, job = time.monotonic() + 600, None
        while time.monotonic() < deadline and proc.poll() is None:
            job = squeue_job(cluster, "rule_run_lm")
            # running, and training has begun (the rule log only fills once the command runs)
            if (
                job
                and job[1] == "RUNNING"
                and train_log.exists()
                and "train:" in train_log.read_text()
            ):
                break
            time.sleep(2)
        assert job and job[1] == "RUNNING", f"run_lm never ran:\n{log.read_text()[-3000:]}"
        subprocess.run(["scancel", job[0]], env=cluster, check=True)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert proc.returncode != 0
    assert f"SLURM-job '{job[0]}' failed, SLURM status is: 'CANCELLED'" in out
    assert "Error in rule run_lm" in out
    assert squeue_job(cluster, "rule_run_lm")[1] == "CANCELLED"
    time.sleep(5)  # a straggling process would write its outputs now
    left = sorted(p.name for p in (repo / RUN).iterdir())
    assert not set(RUN_OUTPUTS) & set(left), left
    # The next invocation (the test config again) plans the job and reruns it to the same metrics.
    dry = snakemake(
        repo, target, *SLURM_ARGS, "--configfile", "config/subset.yaml", "-n", env=cluster
    ).stdout
    assert re.search(r"rule run_lm:.*?reason: Missing output files", dry, re.S)
    snakemake(repo, target, *SLURM_ARGS, "--configfile", "config/subset.yaml", env=cluster)
    assert run_values(repo) == run_values(local_repo)
