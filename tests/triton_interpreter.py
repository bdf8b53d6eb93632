"""Run kernels under the Triton interpreter (``TRITON_INTERPRET=1``: on CPU tensors) in a
subprocess, or skip, saying why, where it cannot run."""

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pillm.accel.kernels import triton_available

ROOT = Path(__file__).resolve().parents[1]

# A loop over run-time bounds, as the kernels have. Triton 3.6's interpreter turns such a bound
# into an int through a 1-element array, which NumPy >= 2.4 refuses (Triton 3.9's does not).
LOOP_PROBE = """
import torch, triton, triton.language as tl
@triton.jit
def loop(out_ptr, n, STEP: tl.constexpr):
    count = 0
    for i in range(tl.program_id(0), n, STEP):
        count += 1
    tl.store(out_ptr, count)
out = torch.zeros(1, dtype=torch.int32)
loop[(1,)](out, 5, STEP=2)
assert out.item() == 3, out
"""
INTERPRETER_LIMIT = "only 0-dimensional arrays can be converted to Python scalars"


@functools.cache
def loop_probe() -> subprocess.CompletedProcess:
    """LOOP_PROBE under the interpreter, once per test process (a Python start with torch and
    Triton: about 3 s, which every interpreter test would otherwise repeat)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", LOOP_PROBE], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def interpreter_env(**env_extra: str) -> dict[str, str]:
    """The environment that runs the kernels under the Triton interpreter (TRITON_INTERPRET=1,
    plus ``env_extra``). Skips without Triton, or where the interpreter cannot loop over
    run-time bounds (the kernels then run compiled in the GPU tests)."""
    if not triton_available():
        pytest.skip("Triton is not installed (pip install triton): the kernels' interpreter "
                    "test cannot run here")  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1", **env_extra}
    probe = loop_probe()
    if probe.returncode and INTERPRETER_LIMIT in probe.stderr:
        import triton

        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run a loop over run-time "
                    f"bounds with NumPy {np.__version__} ({INTERPRETER_LIMIT}; Triton 3.9 can): "
                    "the kernels run compiled in the GPU tests")  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    return env


def run_interpreter_check(module: str, **env_extra: str) -> None:
    """``module._interpreter_check()`` under the interpreter (``interpreter_env``); it must
    print "interpreter ok"."""
    env = interpreter_env(**env_extra)
    code = f"from {module} import _interpreter_check; _interpreter_check()"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "interpreter ok" in out.stdout
