"""GPU slots: concurrent jobs spread over GPUs, share them evenly, and free a slot on exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from pillm.accel.gpu_slots import assign_gpu, claim_slot

HOLD = """
import sys, time
from pillm.accel.gpu_slots import assign_gpu
print(assign_gpu("auto", n_gpus=int(sys.argv[1])), flush=True)
time.sleep(float(sys.argv[2]))
"""


def start(n_gpus: int, hold: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, str(n_gpus), str(hold)], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PILLM_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return {k: v for k, v in os.environ.items()}


def test_concurrent_jobs_get_distinct_gpus_then_share_evenly(env):
    procs = []
    for _ in range(5):  # 5 jobs, 2 GPUs: 3 + 2, never 5 on one device
        procs.append(start(2, 3.0, env))
        time.sleep(0.3)  # started one after another, all still running
    gpus = Counter(p.stdout.readline().strip() for p in procs)
    for p in procs:
        p.wait()
    assert gpus == Counter({"0": 3, "1": 2})


def test_a_finished_or_killed_job_frees_its_slot(env, tmp_path):
    p = start(2, 60.0, env)
    assert p.stdout.readline().strip() == "0"
    q = start(2, 0.0, env)
    assert q.stdout.readline().strip() == "1"  # GPU 0 is taken
    q.wait()
    p.kill()
    p.wait()
    r = start(2, 0.0, env)
    assert r.stdout.readline().strip() == "0"  # the killed job's lock went with it
    r.wait()


def test_cpu_explicit_devices_and_scheduler_pinning_are_left_alone(env, monkeypatch):
    assert assign_gpu("cpu", n_gpus=4) is None
    assert assign_gpu("cuda:1", n_gpus=4) is None
    assert assign_gpu("auto", n_gpus=1) is None  # one GPU: nothing to choose
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # e.g. set by SLURM
    assert assign_gpu("auto", n_gpus=4) is None and os.environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_a_listed_subset_of_gpus_is_what_the_jobs_spread_over(env):
    """CUDA_VISIBLE_DEVICES=2,3 snakemake ...: every job inherits the list; each takes one of
    the two (never a GPU outside it, never all on the first), as on a host of two GPUs."""
    procs = []
    for _ in range(4):
        procs.append(start(8, 3.0, {**env, "CUDA_VISIBLE_DEVICES": "2,3"}))
        time.sleep(0.3)
    gpus = Counter(p.stdout.readline().strip() for p in procs)
    for p in procs:
        p.wait()
    assert gpus == Counter({"2": 2, "3": 2})


def test_gpus_listed_by_uuid_are_chosen_by_uuid(tmp_path):
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    assert claim_slot(uuids, tmp_path) == ("GPU-aaaa", 0)
    assert claim_slot(uuids, tmp_path) == ("GPU-bbbb", 0)


def test_claim_slot_levels(tmp_path):
    assert claim_slot(["0", "1"], tmp_path) == ("0", 0)
    assert claim_slot(["0", "1"], tmp_path) == ("1", 0)
    assert claim_slot(["0", "1"], tmp_path) == ("0", 1)


def test_declared_memory_steers_jobs_to_the_emptier_gpu(tmp_path):
    """A job goes where the running jobs declared the least memory (then the fewest jobs): two
    small jobs beside one large one, not a small one on top of it."""
    assert claim_slot(["0", "1"], tmp_path, 30000) == ("0", 0)
    assert claim_slot(["0", "1"], tmp_path, 5000) == ("1", 0)
    assert claim_slot(["0", "1"], tmp_path, 5000) == ("1", 1)  # by count alone it would be GPU 0
    assert (tmp_path / "gpu1.1").read_text() == "5000"


def test_declared_memory_reaches_the_slot_through_the_environment(env, tmp_path):
    big = start(2, 60.0, {**env, "PILLM_GPU_MEM_MB": "30000"})
    assert big.stdout.readline().strip() == "0"
    small = [start(2, 3.0, {**env, "PILLM_GPU_MEM_MB": "4000"}) for _ in range(2)]
    try:
        assert [p.stdout.readline().strip() for p in small] == ["1", "1"]
    finally:
        big.kill()
        for p in (big, *small):
            p.wait()
