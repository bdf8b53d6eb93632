"""CUDA MPS for the GPU jobs of one workflow: a user-level control daemon, started before the
jobs and quit after them, so the jobs' kernels share the GPU instead of time-slicing it.

MPS changes no setting of the card (no compute mode, no reset): the daemon is an ordinary
process of this user with its pipe and log under ``directory``. A job uses it when its
``CUDA_MPS_PIPE_DIRECTORY`` points there (``client_prefix``); the workflow's shell prefix sets it
only while the daemon's control socket exists, so the sockets go when the daemon goes (it leaves
its control socket behind on quit: ``stop`` and ``start`` remove what no live daemon serves).
Torch-free: the planner calls this.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from pillm.accel.gpu_slots import listed_devices

CONTROL = "nvidia-cuda-mps-control"


def directory_for(root: Path) -> Path:
    """This user's MPS folder for the checkout ``root`` (short: the socket path has a limit)."""
    tag = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    return Path("/tmp") / f"pillm-mps-{os.getuid()}-{tag}"


def pipe_dir(directory: Path) -> Path:
    return directory / "pipe"


def daemon_pids(directory: Path) -> list[int]:
    """This user's control daemons serving ``directory``: processes named CONTROL whose
    environment points CUDA_MPS_PIPE_DIRECTORY there (read from /proc; others' are unreadable)."""
    wanted = f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir(directory)}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0]
            if Path(argv0.decode(errors="replace")).name != CONTROL:
                continue
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return pids


def running(directory: Path) -> bool:
    """Whether a control daemon serves ``directory``: its control socket exists and its process
    lives. A socket without a process (a daemon that quit or was killed leaves it behind) is
    stale: a job pointed at it would not reach MPS and would run alone on the host's numbering
    of the GPUs, not the server's (client_devices)."""
    return (pipe_dir(directory) / "control").exists() and bool(daemon_pids(directory))


def _clear(directory: Path) -> None:
    """Remove what a daemon left in ``directory``: its sockets (the jobs' shell prefix tests for
    the control socket), the GPU list it served and the workflow's marker."""
    shutil.rmtree(pipe_dir(directory), ignore_errors=True)
    for name in ("visible", "started_by_workflow"):
        (directory / name).unlink(missing_ok=True)


def _env(directory: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir(directory)),
        "CUDA_MPS_LOG_DIRECTORY": str(directory / "log"),
    }


def start(directory: Path) -> str:
    """Start the daemon; returns what happened, one line: started, already running, or why it
    could not start (then the jobs time-slice the GPU, as without MPS)."""
    if running(directory):
        return f"MPS: a daemon already runs in {directory}; the GPU jobs share it"
    _clear(directory)  # a stale socket from a daemon that no longer runs
    if shutil.which(CONTROL) is None:
        return f"MPS: {CONTROL} not found; the GPU jobs time-slice the GPU"
    (directory / "pipe").mkdir(parents=True, exist_ok=True)
    (directory / "log").mkdir(parents=True, exist_ok=True)
    try:
        run = subprocess.run([CONTROL, "-d"], env=_env(directory), capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as err:
        return f"MPS: could not start ({err}); the GPU jobs time-slice the GPU"
    if run.returncode != 0:
        why = (run.stderr or run.stdout).strip() or f"exit {run.returncode}"
        return f"MPS: could not start ({why}); the GPU jobs time-slice the GPU"
    (directory / "started_by_workflow").write_text(str(os.getpid()))
    # The server numbers the GPUs it was started with from 0 (client_devices needs the list).
    (directory / "visible").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    return f"MPS: started a daemon in {directory}; the GPU jobs share the GPU through it"


def stop(directory: Path, wait_s: float = 30.0) -> str | None:
    """Quit the daemon if this workflow started it (never one that ran before it), wait for its
    process to end (up to ``wait_s``) and remove its sockets: the daemon leaves its control
    socket behind, and the next build's jobs must not take it for a running daemon."""
    marker = directory / "started_by_workflow"
    if not marker.exists():
        return None
    try:
        subprocess.run([CONTROL], input="quit\n", env=_env(directory), capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as err:
        return f"MPS: could not quit the daemon in {directory} ({err})"
    deadline = time.monotonic() + wait_s
    while daemon_pids(directory) and time.monotonic() < deadline:
        time.sleep(0.2)
    if daemon_pids(directory):
        marker.unlink(missing_ok=True)
        return f"MPS: the daemon in {directory} did not end within {wait_s:g} s of quit"
    _clear(directory)
    return f"MPS: quit the daemon in {directory}"


def client_devices(env: dict[str, str] | None = None) -> str | None:
    """A job's CUDA_VISIBLE_DEVICES as the workflow's MPS server numbers the GPUs; None: unchanged.

    A daemon started under CUDA_VISIBLE_DEVICES (``CUDA_VISIBLE_DEVICES=1 snakemake ...``) serves
    those GPUs as devices 0, 1, ... to its clients, so a client that keeps the host's numbering
    names a device the server does not have and finds no GPU at all. A job that inherited the
    daemon's list (or part of it) gets each GPU's position in that list instead. Call it before
    CUDA starts; ``env`` defaults to (and is updated in) ``os.environ``."""
    env = os.environ if env is None else env
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY")
    wanted = listed_devices(env.get("CUDA_VISIBLE_DEVICES"))
    record = Path(pipe).parent / "visible" if pipe else None
    if wanted is None or record is None or not record.is_file():
        return None
    served = listed_devices(record.read_text())
    if not served or not wanted or not set(wanted) <= set(served):
        return None  # the daemon sees every GPU, or the job names one it does not serve
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(served.index(d)) for d in wanted)
    return env["CUDA_VISIBLE_DEVICES"]


def client_prefix(directory: Path) -> str:
    """Shell that points a job at the daemon while its control socket exists."""
    pipe = pipe_dir(directory)
    return f"if [ -e {pipe}/control ]; then export CUDA_MPS_PIPE_DIRECTORY={pipe}; fi; "
