"""Faults lose nothing: a full disk during a write, or SIGTERM/SIGINT of a running job, leaves no
file that looks finished (the previous version, if any, stays whole), and the next run completes.
"""

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pillm.core import records
from pillm.core.records import write_json, write_rows_parquet

REPO = Path(__file__).resolve().parents[2]


def full_disk_after(n_bytes: int):
    """A write that stores ``n_bytes`` of its data, then fails as a full disk does."""

    def write(path, data):
        with open(path, "wb") as fh:
            fh.write(data[:n_bytes] if isinstance(data, bytes) else data[:n_bytes].encode())
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    return write


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_full_disk_leaves_the_previous_file_whole_and_a_rerun_completes(tmp_path, monkeypatch):
    out = tmp_path / "run" / "metrics.json"
    write_json(out, [{"metric": "loss", "value": 1.0}])
    before = out.read_bytes()
    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", lambda self, text: full_disk_after(10)(self, text))
        with pytest.raises(OSError) as err:
            write_json(out, [{"metric": "loss", "value": 2.0}])
    assert err.value.errno == errno.ENOSPC
    assert out.read_bytes() == before and leftovers(out.parent) == []
    write_json(out, [{"metric": "loss", "value": 2.0}])  # space is back: the rerun
    assert json.loads(out.read_text()) == [{"metric": "loss", "value": 2.0}]


def test_a_full_disk_leaves_no_new_file(tmp_path, monkeypatch):
    """Parquet (pyarrow's writer), a checkpoint (torch.save) and a late error (reported only when
    the data is flushed, as on NFS): no output, no temporary file."""
    import pyarrow.parquet as pq
    import torch

    from pillm.core.tensor_files import load_tensor_file, save_tensor_file

    curve = tmp_path / "curve.parquet"
    with monkeypatch.context() as m:
        m.setattr(pq, "write_table", lambda table, path: full_disk_after(100)(path, b"PAR1" * 99))
        with pytest.raises(OSError):
            write_rows_parquet(curve, [{"step": 1, "loss": 2.0}], {"seed": 0})
    ckpt = tmp_path / "model.pt"
    with monkeypatch.context() as m:
        m.setattr(torch, "save", lambda obj, path: full_disk_after(64)(path, b"PK" * 512))
        with pytest.raises(OSError):
            save_tensor_file(ckpt, "k", {"w": torch.ones(3)}, {})
    late = tmp_path / "late.json"
    with monkeypatch.context() as m:

        def fsync(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        m.setattr(os, "fsync", fsync)
        with pytest.raises(OSError):
            write_json(late, {"a": 1})
    assert not curve.exists() and not ckpt.exists() and not late.exists()
    assert leftovers(tmp_path) == []
    write_rows_parquet(curve, [{"step": 1, "loss": 2.0}], {"seed": 0})
    save_tensor_file(ckpt, "k", {"w": torch.ones(3)}, {})
    write_json(late, {"a": 1})
    assert pq.read_table(curve).num_rows == 1
    assert torch.equal(load_tensor_file(ckpt, "k").tensors["w"], torch.ones(3))


# A ``python -m pillm mirror`` job whose write pauses after its first bytes (PAUSE seconds),
# so a signal can arrive mid-write; the job's entry point is pillm's own (``__main__``).
JOB = r"""
import os, runpy, sys, time
import pillm.core.records as records
import pillm.data.sources as sources

def mirror_job(source, local_dir, out, revisions=None):
    with records.atomic_path(out) as tmp:
        with open(tmp, "w") as fh:
            fh.write('{"source": ')
            fh.flush()
            print("writing", flush=True)
            time.sleep(float(os.environ["PAUSE"]))
            fh.write('"local"}\n')

sources.mirror_job = mirror_job
sys.argv = ["pillm", "mirror", "--params", '{"source": "local"}', "--out", sys.argv[1]]
runpy.run_module("pillm", run_name="__main__", alter_sys=True)
"""


def start_job(out: Path, pause: float) -> subprocess.Popen:
    env = {**os.environ, "PAUSE": str(pause), "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen([sys.executable, "-c", JOB, str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_job_leaves_nothing_that_looks_finished(tmp_path, sig):
    out = tmp_path / "data" / "mirror.json"
    job = start_job(out, pause=60)
    for line in job.stdout:  # the job's own log lines come first
        if line.strip() == "writing":
            break
    else:
        pytest.fail(f"the job ended before its write: {job.communicate()[1]}")
    assert leftovers(out.parent)  # the partial write exists, under a temporary name
    job.send_signal(sig)
    _, err = job.communicate(timeout=30)
    assert job.returncode in (128 + sig, -sig), err  # SIGTERM: exit 143; SIGINT: re-raised
    assert not out.exists() and leftovers(out.parent) == [], err
    rerun = start_job(out, pause=0)  # the next run redoes the job and completes
    rerun.communicate(timeout=60)
    assert rerun.returncode == 0 and json.loads(out.read_text()) == {"source": "local"}


def test_atomic_path_flushes_before_rename(tmp_path, monkeypatch):
    """The data reaches the disk before the file gets its name (fsync of the file)."""
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd))  # fmt: skip
    records.write_text(tmp_path / "a.txt", "x")
    assert Path(synced[0]).name.startswith(".a.txt.") and synced[0].endswith(".tmp")
