"""One GPU per job on multi-GPU hosts: a lock-file slot picks the least-loaded device.

Snakemake's ``--resources gpu=N`` caps how many GPU jobs run at once but does not say which
device each one gets, so every job would land on GPU 0. Before CUDA is initialised, a GPU job
takes an exclusive ``flock`` on one slot file ``gpu<i>.<k>`` and exports
``CUDA_VISIBLE_DEVICES=i``. Slots are tried level by level (k = 0 on every GPU, then k = 1, ...)
so jobs spread over the GPUs first and share them evenly when N exceeds the GPU count (several
small jobs per GPU is how the paper DAG fills one GPU). The kernel drops the lock when the
process exits, however it exits, so a killed job never leaks its slot.

Left alone: CPU jobs, an explicit ``cuda:<i>``, and jobs whose CUDA_VISIBLE_DEVICES a scheduler
(SLURM, Kubernetes) already set.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

MAX_SHARE = 64  # jobs per GPU before a job stops looking for a slot and just runs on GPU 0
_held: list[int] = []  # open slot descriptors: the lock lives as long as the process


def gpu_count(proc_dir: str = "/proc/driver/nvidia/gpus") -> int:
    """GPUs the NVIDIA driver exposes, without initialising CUDA (0 when there is none)."""
    p = Path(proc_dir)
    return len(list(p.iterdir())) if p.is_dir() else 0


def lock_dir() -> Path:
    return Path(os.environ.get("PILLM_GPU_LOCK_DIR", f"/tmp/pillm-gpu-slots-{os.getuid()}"))


def claim_slot(n_gpus: int, locks: Path) -> tuple[int, int] | None:
    """Lock the first free slot (gpu, level), least-loaded GPU first; None if all are taken."""
    locks.mkdir(parents=True, exist_ok=True)
    for level in range(MAX_SHARE):
        for gpu in range(n_gpus):
            fd = os.open(locks / f"gpu{gpu}.{level}", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _held.append(fd)
            return gpu, level
    return None


def assign_gpu(device: str, n_gpus: int | None = None) -> str | None:
    """Pin this process to one GPU before CUDA starts; returns the CUDA_VISIBLE_DEVICES it set."""
    if device == "cpu" or device.startswith("cuda:") or "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    n = gpu_count() if n_gpus is None else n_gpus
    if n <= 1:
        return None  # nothing to choose
    slot = claim_slot(n, lock_dir())
    if slot is None:
        return None
    os.environ["CUDA_VISIBLE_DEVICES"] = str(slot[0])
    return os.environ["CUDA_VISIBLE_DEVICES"]
