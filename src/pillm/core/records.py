"""Run records: tidy metrics rows with provenance, and atomic file writes.

Every run writes one ``metrics.json``: a list of tidy rows (one metric per row) that carry the
run's identity (experiment, variant, seed, corpus, data policy) and its provenance (config hash,
git revision, the revisions of the data it read, device, library versions). Outputs are written
to a temporary name and renamed, so a killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only on success.

    The temporary file is flushed to disk before the rename, so a write error the file system
    reports late (a full disk on NFS, an I/O error) fails here, and a crash after the rename
    leaves the whole file. Any error, or SIGTERM/SIGINT in a ``python -m pillm`` job (``pillm.cli``
    turns them into exceptions), removes the temporary file and leaves ``path`` as it was:
    absent, or the previous complete version."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _fsync(tmp_path)
        os.replace(tmp_path, path)
        with contextlib.suppress(OSError):  # the entry's durability: not every file system can
            _fsync(path.parent)
    finally:
        tmp_path.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def config_hash(cfg: Mapping[str, Any]) -> str:
    """Short stable hash of a config mapping (key order does not matter)."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def git_revision() -> str:
    """HEAD of the repository this package runs from, with ``-dirty`` if the tree has edits.

    ``PILLM_GIT_REV`` overrides it: a GPU host receives the current working tree beside a stale
    git directory, so there every file edited since looks modified; the revision of the tree as
    sent comes along instead (benchmarks/gpu_env.sh reads it from ``.gpu_rev``)."""
    if os.environ.get("PILLM_GIT_REV"):
        return os.environ["PILLM_GIT_REV"]
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev


def cpu_name(threads: int) -> str:
    """How a CPU run names its device: 'CPU (<processor>, <n> thread(s))'."""
    return f"CPU ({platform.processor() or platform.machine()}, {threads} thread{'s' * (threads != 1)})"


def data_revisions(meta: Mapping[str, Any]) -> str:
    """The ``data_revisions`` column of a run record, from the ``meta`` of the data a job read
    (corpus and token ``meta.json``, the SST-2 and image meta: their ``revisions``, as
    ``pillm.data.revisions`` records them): JSON {source: the hub commit it came from, or for
    the offline mirror, which came from no commit, the SHA256SUMS digest that pins its files}.
    Reads records already made, so a job hashes nothing."""
    found: dict[str, str] = {}
    for key, rec in (meta.get("revisions") or {}).items():
        if rec.get("revision"):
            found[key] = rec["revision"]
        elif rec.get("sha256sums"):
            found[key] = f"offline mirror, SHA256SUMS sha256:{rec['sha256sums']}"
        else:
            found[key] = "not recorded"
    return json.dumps(found, sort_keys=True)


def provenance(device: str, data: Mapping[str, Any]) -> dict[str, str]:
    """Where and with what a run was made; ``data``: the meta of the data it read
    (``data_revisions``)."""
    import numpy
    import torch

    from pillm.accel.cuda_driver import cuda_wait_mode

    cuda = device.startswith("cuda")
    if cuda:
        device_name = torch.cuda.get_device_name(torch.device(device))
    else:
        device_name = cpu_name(torch.get_num_threads())
    return {
        "git_rev": git_revision(),
        "data_revisions": data_revisions(data),
        "device": device,
        "device_name": device_name,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.version.cuda or "none",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"),  # gpu_slots.py
        # how its threads waited for the GPU (pillm.accel.cuda_driver.sleep_while_waiting)
        "cuda_wait": cuda_wait_mode(torch.device(device).index or 0) if cuda else "none",
    }


# The columns that identify a run in every tidy row (the rest is metric, value and provenance).
IDENTITY = ("experiment", "variant", "seed", "corpus", "tokenizer", "data_policy")


def tidy_records(
    identity: Mapping[str, Any], metrics: Mapping[str, float], context: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One row per metric: identity columns + ``metric``/``value`` + provenance context."""
    rows = []
    for name, value in metrics.items():
        row = {**identity, "metric": name, "value": float(value), **context}
        rows.append(row)
    return rows


def read_records(paths: list[str | os.PathLike]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        with open(p) as fh:
            rows.extend(json.load(fh))
    return rows


def write_rows_parquet(
    path: str | os.PathLike, rows: list[dict[str, Any]], identity: Mapping[str, Any]
) -> None:
    """Rows (curves, sweeps) plus identity columns as parquet; pyarrow, so GPU hosts need no polars."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = sorted({k for row in rows for k in row})
    table = pa.table({c: [row.get(c) for row in rows] for c in cols})
    for key, value in identity.items():
        table = table.append_column(key, pa.array([value] * len(rows)))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
