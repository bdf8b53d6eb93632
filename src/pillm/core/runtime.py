"""Runtime helpers every study uses: device choice, seeding, CUDA sync, TF32, lr schedule, peak
memory; and the benchmarks' kernel profile."""

from __future__ import annotations

import contextlib
import math
import os
import resource

import numpy as np
import torch

from pillm.accel.cuda_driver import sleep_while_waiting


def resolve_device(name: str) -> str:
    """The device a job runs on. A CUDA device's waits then sleep (``sleep_while_waiting``): every
    GPU job resolves its device first, before its first CUDA context exists."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
        # The workflow planned this job for a GPU (PILLM_DEVICE_KIND, set by its shell prefix on
        # a host whose driver lists one): falling back to CPU threads would run it many times
        # slower and still look like a GPU build.
        if name == "cpu" and os.environ.get("PILLM_DEVICE_KIND") == "cuda":
            raise RuntimeError(
                "device: auto found no usable CUDA GPU in a job the workflow planned for one "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}, "
                f"CUDA_MPS_PIPE_DIRECTORY={os.environ.get('CUDA_MPS_PIPE_DIRECTORY', 'unset')}): "
                "check that variable and the driver, or set device: cpu"
            )
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device: {name} was requested but no CUDA GPU is visible; use device: auto or cpu"
        )
    if name.startswith("cuda"):
        sleep_while_waiting()
        # PILLM_SYNC_DEBUG=warn (or error): name every operation that makes the host wait for
        # the GPU, once per source line, in the job's log. An audit switch, off by default.
        mode = os.environ.get("PILLM_SYNC_DEBUG")
        if mode:
            torch.cuda.set_sync_debug_mode(mode)
    return name


def sync(device: str | torch.device) -> None:
    """Wait for queued CUDA work on ``device`` (a no-op elsewhere): call before reading a clock."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def kernel_profile(device: str, label: str, rows: int = 15, shapes: bool = False):
    """torch.profiler around the block, then its top kernels printed under ``label``: by CUDA
    time on CUDA (where a CUDA graph replays, its kernels are not attributed: profile eagerly),
    by CPU time elsewhere. ``shapes``: one row per operator and input shapes (which call of a
    many-times-called operator costs what)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=shapes) as p:
        yield
        sync(device)
    table = p.key_averages(group_by_input_shape=shapes).table(
        sort_by="cuda_time_total" if cuda else "cpu_time_total",
        row_limit=rows,
        max_name_column_width=70,
        max_shapes_column_width=90,
    )
    print(f"{label}:\n{table}", flush=True)


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 matmuls and convolutions on CUDA inside the block (a no-op elsewhere), restored after.

    Off wherever float32 features feed float64 Grams or an eigh cutoff (PIL solves, the probe's
    fits, SST-2 heads): TF32's 10-bit mantissa would blur them. On for gradient training and
    sampling of the generative AdamW arms: the speed a practitioner would use."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@contextlib.contextmanager
def deterministic(enabled: bool, strict: bool = False):
    """Deterministic kernels inside the block (gradient training on CUDA), restored after.

    Without them a rerun of the same job on the same GPU gives another model: atomics in
    backward passes add in a different order each time (one H100: the baseline LM's test loss
    moves by about 2e-4 and its weights by up to 0.04). With them two runs are bit for bit
    equal; what they cost in tokens/s is measured by ``benchmarks/trainer_throughput.py``
    (docs/performance.md).
    cuBLAS also needs CUBLAS_WORKSPACE_CONFIG before its first call (``pillm.cli`` sets it).

    ``strict`` (LM training): an operation without a deterministic kernel raises instead of
    warning, and attention avoids cuDNN's kernels. Two builds with warnings only still differed
    in 6 of 90 LM runs, all with attention: PyTorch 2.11's cuDNN attention backward has no
    deterministic mode (it only warns), and its flash attention backward turns deterministic
    only in strict mode. Otherwise warn-only: an operation without a deterministic kernel warns.
    PyTorch's NaN-fill of every new buffer (on by default with deterministic algorithms)
    stays off: it adds a memory-bound write to each allocation, also inside a captured CUDA
    graph, and no kernel here reads a buffer before writing it (the GPU rerun test checks the
    result, tests/lm/test_train.py)."""
    if not enabled:
        yield
        return
    # Read by PyTorch at each cuBLAS call in deterministic mode (strict mode raises without it);
    # pillm.cli sets it before CUDA starts, this covers benchmarks and tests.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fill = torch.utils.deterministic
    old = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        fill.fill_uninitialized_memory,
        torch.backends.cuda.cudnn_sdp_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=not strict)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    fill.fill_uninitialized_memory = False
    if strict:
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old[0], warn_only=old[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = old[2:4]
        fill.fill_uninitialized_memory = old[4]
        torch.backends.cuda.enable_cudnn_sdp(old[5])


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def lr_at(step: int, total: int, peak: float, warmup: int, min_frac: float) -> float:
    """Linear warm-up to ``peak``, then cosine decay to ``min_frac * peak`` at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
