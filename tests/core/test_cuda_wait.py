"""Waiting for the GPU sleeps instead of spinning a core (pillm.accel.cuda_driver).

Each case runs in a fresh interpreter: the flag must be set before the process's first CUDA
context, and the test process may already hold one."""

import json
import os
import subprocess
import sys

import pytest

from pillm.accel import cuda_driver
from pillm.accel.cuda_driver import sleep_while_waiting

# One process: resolve the device as every job does, queue ~1 s of GPU sleep, wait for it, and
# report the CPU seconds the wait cost and the context's scheduling mode.
WAIT = """
import json, time, torch
from pillm.accel.cuda_driver import cuda_wait_mode
from pillm.core.runtime import resolve_device
device = resolve_device("cuda")
torch.zeros(1, device=device)
torch.cuda.synchronize()
cycles = int(1.0 * torch.cuda.get_device_properties(0).clock_rate * 1000)  # kHz -> ~1 s
wall, cpu = time.perf_counter(), time.process_time()
torch.cuda._sleep(cycles)
torch.cuda.synchronize()
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "mode": cuda_wait_mode(0)}))
"""


def _wait(spin: bool) -> dict:
    env = {**os.environ, "PILLM_CUDA_SPIN": "1" if spin else "0"}
    out = subprocess.run(
        [sys.executable, "-c", WAIT], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_without_a_driver_nothing_is_set(monkeypatch):
    monkeypatch.setattr("pillm.accel.cuda_driver._cuda_driver", lambda: None)
    assert sleep_while_waiting() is False


def test_a_driver_without_the_functions_is_left_alone(monkeypatch):
    class OldDriver:  # a library that loads but lacks cuDevicePrimaryCtxSetFlags
        def __init__(self, name):
            self.cuInit = self.cuDeviceGetCount = self.cuDeviceGet = lambda *a: 0
            self.cuDevicePrimaryCtxGetState = lambda *a: 0

    monkeypatch.setattr("pillm.accel.cuda_driver.ctypes.CDLL", OldDriver)
    assert cuda_driver._cuda_driver() is None
    assert sleep_while_waiting() is False
    assert cuda_driver.cuda_wait_mode() == "none"


def test_the_opt_out_keeps_cuda_default(monkeypatch):
    monkeypatch.setenv("PILLM_CUDA_SPIN", "1")
    monkeypatch.setattr(
        "pillm.accel.cuda_driver._cuda_driver", lambda: pytest.fail("driver loaded")
    )
    assert sleep_while_waiting() is False


@pytest.mark.gpu
def test_a_cuda_job_sleeps_while_the_gpu_works():
    sleeping, spinning = _wait(spin=False), _wait(spin=True)
    assert sleeping["mode"] == "blocking", sleeping
    assert spinning["mode"] != "blocking", spinning
    assert sleeping["wall"] > 0.5 and spinning["wall"] > 0.5  # the GPU did sleep ~1 s
    # spinning costs about the whole wait in CPU time; sleeping almost none
    assert sleeping["cpu"] < 0.2 * sleeping["wall"], sleeping
    assert spinning["cpu"] > 0.5 * spinning["wall"], spinning
