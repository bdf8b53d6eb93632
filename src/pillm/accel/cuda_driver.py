"""The CUDA driver, read through ctypes without torch: how a process's threads wait for the GPU.

Torch-free, so that provenance records (read by torch-free report commands) can name the mode.
"""

from __future__ import annotations

import ctypes
import os

# The scheduling bits of a CUDA context's flags (cuda.h CUctx_flags)
_SCHED_MASK, _SCHED_BLOCKING_SYNC = 0x07, 0x04
_SCHED_NAMES = {0: "auto", 1: "spin", 2: "yield", 4: "blocking"}


# the driver functions used here (CUDA >= 7); a driver without one of them is left alone
_NEEDED = ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxGetState",
           "cuDevicePrimaryCtxSetFlags")  # fmt: skip


def _cuda_driver():
    """The CUDA driver library, or None where it is missing or lacks a function used here."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return lib if all(hasattr(lib, name) for name in _NEEDED) else None


def sleep_while_waiting() -> bool:
    """Let this process's threads sleep while they wait for the GPU, instead of spinning: the
    primary CUDA context of every visible device gets blocking synchronization.

    CUDA's default ("auto": spin while a process has fewer contexts than the host has cores) keeps
    a core at 100 % for as long as a thread waits. Each GPU job of the paper DAG used 0.6-1.0
    CPU-seconds per second of its wall time (H200 builds of cc618bb), most of it waiting, and
    14 jobs share 16 cores (28 share 32 on two GPUs): the spinners took the cores that start-up,
    compilation and data preparation need. ``PILLM_CUDA_SPIN=1`` keeps CUDA's default. Returns
    whether every device's context now blocks (False without a driver, or where a context
    already existed with other flags).
    """
    if os.environ.get("PILLM_CUDA_SPIN") == "1":
        return False
    lib = _cuda_driver()
    if lib is None or lib.cuInit(0) != 0:
        return False
    count = ctypes.c_int()
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    # cuda.h maps the name to _v2 since CUDA 11; older drivers have only the first version
    v2 = hasattr(lib, "cuDevicePrimaryCtxSetFlags_v2")
    set_flags = lib.cuDevicePrimaryCtxSetFlags_v2 if v2 else lib.cuDevicePrimaryCtxSetFlags
    for ordinal in range(count.value):
        state = _primary_context(lib, ordinal)
        if state is None:
            return False
        dev, flags = state
        set_flags(dev, (flags & ~_SCHED_MASK) | _SCHED_BLOCKING_SYNC)
    return all(cuda_wait_mode(i) == "blocking" for i in range(count.value))


def _primary_context(lib, ordinal: int) -> tuple[ctypes.c_int, int] | None:
    """(device handle, primary context flags) of visible device ``ordinal``; None if absent."""
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None
    lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
    return dev, flags.value


def cuda_wait_mode(ordinal: int = 0) -> str:
    """How threads wait for visible device ``ordinal`` (its primary context's scheduling flag:
    auto, spin, yield or blocking); 'none' without a CUDA driver."""
    lib = _cuda_driver()
    if lib is None or lib.cuInit(0) != 0:
        return "none"
    state = _primary_context(lib, ordinal)
    if state is None:
        return "none"
    sched = state[1] & _SCHED_MASK
    return _SCHED_NAMES.get(sched, hex(sched))
