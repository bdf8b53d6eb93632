"""One GPU per job on multi-GPU hosts: a lock-file slot picks the least-loaded device.

Snakemake's ``--resources gpu=N`` caps how many GPU jobs run at once but does not say which
device each one gets, so every job would land on GPU 0. Before CUDA is initialised, a GPU job
takes an exclusive ``flock`` on one slot file ``gpu<i>.<k>``, writes into it the GPU memory it
declared (``PILLM_GPU_MEM_MB``, the rule's ``gpu_mem_mb``; 0 when unset) and exports
``CUDA_VISIBLE_DEVICES=i``. It picks the GPU whose running jobs declared the least memory, then
the one with the fewest jobs, then the lowest index: with equal declarations jobs spread over
the GPUs first and share them evenly when N exceeds the GPU count (several small jobs per GPU is
how the paper DAG fills one GPU), and a 30 GB job does not land beside three 12 GB ones when
another card holds less (Snakemake's gpu_mem_mb budget is one sum over all cards). Picking is
serialised by a lock on ``pick.lock``, so jobs that start together see each other's claims. The
kernel drops the locks when the process exits, however it exits, so a killed job never leaks
its slot.

Left alone: CPU jobs, an explicit ``cuda:<i>``, and jobs whose CUDA_VISIBLE_DEVICES names one
device (a scheduler's pin, SLURM or Kubernetes, or a build restricted to one GPU). A list of
several (``CUDA_VISIBLE_DEVICES=2,3 snakemake ...``) is the set the jobs spread over: each job
takes a slot on one of them and keeps that one alone, as on a host without the variable.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

MAX_SHARE = 64  # jobs per GPU before a job stops looking for a slot and just runs on GPU 0
_held: list[int] = []  # open slot descriptors: the lock lives as long as the process


def gpu_count(proc_dir: str = "/proc/driver/nvidia/gpus") -> int:
    """GPUs the NVIDIA driver exposes, without initialising CUDA (0 when there is none)."""
    p = Path(proc_dir)
    return len(list(p.iterdir())) if p.is_dir() else 0


def listed_devices(value: str | None) -> list[str] | None:
    """The devices a CUDA_VISIBLE_DEVICES value names (indices or UUIDs, in order); None when
    the variable is unset."""
    return None if value is None else [d.strip() for d in value.split(",") if d.strip()]


def lock_dir() -> Path:
    return Path(os.environ.get("PILLM_GPU_LOCK_DIR", f"/tmp/pillm-gpu-slots-{os.getuid()}"))


def _held_slots(locks: Path, gpus: list[str]) -> dict[str, list[int]]:
    """Per GPU, the MiB each running job declared (slot files locked by another process)."""
    held: dict[str, list[int]] = {g: [] for g in gpus}
    for f in locks.glob("gpu*.*"):
        gpu = f.name[3:].rsplit(".", 1)[0]
        if gpu not in held:
            continue
        fd = os.open(f, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # succeeds only on a free slot
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="ignore").strip()
            held[gpu].append(int(text) if text.isdigit() else 0)
        finally:
            os.close(fd)
    return held


def claim_slot(gpus: Sequence[str], locks: Path, mem_mb: int = 0) -> tuple[str, int] | None:
    """Lock a free slot (gpu, level) on the GPU with the least declared memory, then the fewest
    jobs, then the first listed, and write ``mem_mb`` into it; None if all slots are taken.
    ``gpus``: the device names to choose from, as CUDA_VISIBLE_DEVICES writes them."""
    names = list(gpus)
    locks.mkdir(parents=True, exist_ok=True)
    pick = os.open(locks / "pick.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(pick, fcntl.LOCK_EX)  # one pick at a time: each sees the previous claims
        held = _held_slots(locks, names)
        for gpu in sorted(names, key=lambda g: (sum(held[g]), len(held[g]), names.index(g))):
            for level in range(MAX_SHARE):
                fd = os.open(locks / f"gpu{gpu}.{level}", os.O_CREAT | os.O_RDWR, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(int(mem_mb)).encode(), 0)
                _held.append(fd)
                return gpu, level
        return None
    finally:
        os.close(pick)  # closing drops the pick lock


def assign_gpu(device: str, n_gpus: int | None = None) -> str | None:
    """Pin this process to one GPU before CUDA starts; returns the CUDA_VISIBLE_DEVICES it set.
    The candidates are the devices CUDA_VISIBLE_DEVICES lists, else the host's ``n_gpus``
    (default: ``gpu_count``). The memory it declares comes from ``PILLM_GPU_MEM_MB`` (set by the
    GPU rules' shell)."""
    if device == "cpu" or device.startswith("cuda:"):
        return None
    gpus = listed_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if gpus is None:
        gpus = [str(g) for g in range(gpu_count() if n_gpus is None else n_gpus)]
    if len(gpus) <= 1:
        return None  # nothing to choose
    declared = os.environ.get("PILLM_GPU_MEM_MB", "")
    slot = claim_slot(gpus, lock_dir(), int(declared) if declared.isdigit() else 0)
    if slot is None:
        return None
    os.environ["CUDA_VISIBLE_DEVICES"] = slot[0]
    return os.environ["CUDA_VISIBLE_DEVICES"]
