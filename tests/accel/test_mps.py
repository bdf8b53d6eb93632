"""The workflow's MPS daemon: started where the control binary runs, quit only by the workflow
that started it, and jobs pointed at it only while its control socket exists (a stand-in
binary plays nvidia-cuda-mps-control)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pillm.accel import mps

FAKE = """#!/usr/bin/env bash
# stand-in: -d leaves a process named like the daemon (with the caller's environment) and the
# control entry in the pipe dir; "quit" on stdin ends the process and, as the real daemon does,
# leaves the control entry behind
if [ "${1:-}" = "-d" ]; then
  [ -n "${FAIL:-}" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  (exec -a nvidia-cuda-mps-control sleep 600) >/dev/null 2>&1 &
  pid=$!
  echo $pid >"$CUDA_MPS_PIPE_DIRECTORY/../daemon.pid"
  # return once the process bears the daemon's name, as the real one's fork does at once
  for _ in $(seq 500); do
    tr '\\0' ' ' </proc/$pid/cmdline | grep -q '^nvidia-cuda-mps-control' && exit 0; sleep 0.01
  done
  exit 1
fi
read -r cmd; [ "$cmd" = quit ] && kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/../daemon.pid")"
"""


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / mps.CONTROL
    exe.write_text(FAKE)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    yield exe
    for pid_file in tmp_path.rglob("daemon.pid"):  # no stand-in daemon outlives its test
        subprocess.run(["kill", pid_file.read_text().strip()], capture_output=True)


def outside_daemon(d, exe) -> None:
    """A daemon in ``d`` started by someone else (not the workflow)."""
    (d / "pipe").mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "CUDA_MPS_PIPE_DIRECTORY": str(d / "pipe")}
    subprocess.run([str(exe), "-d"], env=env, check=True)


def test_start_then_stop(tmp_path, fake_control):
    d = tmp_path / "mps"
    assert "started" in mps.start(d)
    assert mps.running(d) and len(mps.daemon_pids(d)) == 1
    assert "quit" in mps.stop(d)
    assert not mps.running(d) and not mps.daemon_pids(d)
    # its sockets are gone: the jobs' shell prefix no longer points at it
    assert not (d / "pipe" / "control").exists() and not (d / "visible").exists()


def test_a_second_build_starts_its_own_daemon(tmp_path, fake_control):
    """The daemon leaves its control socket behind when it quits: the next build must not take
    that for a running daemon (its jobs would run without MPS, on the host's GPU numbering)."""
    d = tmp_path / "mps"
    mps.start(d)
    pid = mps.daemon_pids(d)
    mps.stop(d)
    assert "started" in mps.start(d)
    assert mps.running(d) and mps.daemon_pids(d) != pid
    mps.stop(d)


def test_a_stale_socket_is_cleared_and_a_daemon_started(tmp_path, fake_control):
    d = tmp_path / "mps"
    (d / "pipe").mkdir(parents=True)
    (d / "pipe" / "control").touch()  # left by a daemon that was killed
    (d / "visible").write_text("1")
    assert not mps.running(d)
    assert "started" in mps.start(d)
    assert mps.running(d)
    mps.stop(d)


def test_a_daemon_that_ran_before_is_shared_and_left_running(tmp_path, fake_control):
    d = tmp_path / "mps"
    outside_daemon(d, fake_control)
    assert "already runs" in mps.start(d)
    assert mps.stop(d) is None
    assert mps.running(d)


def test_no_binary_or_a_failing_start_leaves_the_jobs_without_mps(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "not found" in mps.start(tmp_path / "a")
    assert mps.stop(tmp_path / "a") is None


def test_a_failing_start_says_why(tmp_path, fake_control, monkeypatch):
    monkeypatch.setenv("FAIL", "1")
    line = mps.start(tmp_path / "b")
    assert "could not start" in line and "already running" in line
    assert not mps.running(tmp_path / "b")


def test_the_client_prefix_exports_the_pipe_only_while_the_daemon_runs(tmp_path):
    d = tmp_path / "mps"
    (d / "pipe").mkdir(parents=True)
    script = mps.client_prefix(d) + 'echo "${CUDA_MPS_PIPE_DIRECTORY:-none}"'
    off = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "none"
    (d / "pipe" / "control").touch()
    on = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, check=True)
    assert on.stdout.strip() == str(d / "pipe")


def test_start_records_the_gpus_the_daemon_serves(tmp_path, fake_control, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    d = tmp_path / "mps"
    mps.start(d)
    assert (d / "visible").read_text() == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    mps.start(tmp_path / "all")
    assert (tmp_path / "all" / "visible").read_text() == ""


@pytest.mark.parametrize(
    ("served", "job", "expect"),
    [
        ("1", "1", "0"),  # CUDA_VISIBLE_DEVICES=1 snakemake ...: the server's only GPU is 0
        ("0,2", "2", "1"),
        ("0,2", "2,0", "1,0"),
        ("GPU-aa,GPU-bb", "GPU-bb", "1"),
        ("", "1", None),  # a daemon of every GPU numbers them as the host does
        ("1", "3", None),  # a GPU the server lacks: left for CUDA to refuse
    ],
)
def test_a_job_names_its_gpu_as_the_mps_server_numbers_them(tmp_path, served, job, expect):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "visible").write_text(served)
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"), "CUDA_VISIBLE_DEVICES": job}
    assert mps.client_devices(env) == expect
    assert env["CUDA_VISIBLE_DEVICES"] == (expect or job)


def test_without_the_workflow_daemon_the_devices_are_left_alone(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "1"}
    assert mps.client_devices(env) is None  # no MPS pipe
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(tmp_path / "pipe")  # a daemon the workflow did not start
    assert mps.client_devices(env) is None and env["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_build_on_two_listed_gpus_pins_each_job_to_one_as_the_server_numbers_them(
    tmp_path, monkeypatch
):  # fmt: skip
    """CUDA_VISIBLE_DEVICES=2,3 snakemake ...: the daemon serves GPUs 2 and 3 as 0 and 1; a job
    maps its list onto that numbering, then takes one of the two."""
    from pillm.accel.gpu_slots import assign_gpu

    (tmp_path / "pipe").mkdir()
    (tmp_path / "visible").write_text("2,3")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "pipe"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("PILLM_GPU_LOCK_DIR", str(tmp_path / "locks"))
    assert mps.client_devices() == "0,1"
    assert assign_gpu("auto") == "0"  # the server's device 0: the host's GPU 2


CLIENT = """
import subprocess, torch
torch.ones(1, device="cuda").sum().item()  # a CUDA context: through MPS, the server holds it
apps = subprocess.run(["nvidia-smi", "--query-compute-apps=process_name", "--format=csv,noheader"],
                      capture_output=True, text=True, check=True).stdout
print("mps-server" if "nvidia-cuda-mps-server" in apps else "no-server")
"""


@pytest.mark.gpu
def test_two_builds_in_a_row_each_share_the_gpu_through_their_own_daemon():
    """On a CUDA host with the real daemon: the first build's daemon quits leaving its socket;
    the second build starts its own, and its job runs through an MPS server."""
    if shutil.which(mps.CONTROL) is None:
        pytest.skip(f"{mps.CONTROL} not on PATH: the jobs time-slice the GPU here")
    d = Path(tempfile.mkdtemp(prefix="pillm-mps-test-", dir="/tmp"))  # short: socket paths
    try:
        for build in (1, 2):
            assert "started" in mps.start(d), f"build {build}"
            env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(mps.pipe_dir(d))}
            out = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                                 text=True, check=True)  # fmt: skip
            assert out.stdout.strip() == "mps-server", (build, out.stderr[-2000:])
            assert "quit" in mps.stop(d)
            assert not mps.running(d) and not (mps.pipe_dir(d) / "control").exists()
    finally:
        mps.stop(d)
        shutil.rmtree(d, ignore_errors=True)
