"""Build the offline mirror's layout from the Hugging Face hub (rule ``mirror``, ``data.source: auto``).

Every file of ``sources.MIRROR_FILES`` is written under the same name and in the same format as
in the offline mirror, from the hub repositories of ``sources.HUB_DATASETS`` at their pinned
revisions, then checked as its ``check`` says: ``bytes`` against the committed sha256,
``content`` against the committed content digest (``content_digest``), ``differs`` recorded as
different, ``skipped`` not built. A failed check stops the build naming the file and revision.
The result is a folder the ``local`` source reads: its own ``SHA256SUMS`` (the digests of the
files written) and ``MIRROR.json`` (per file: repository, revision, check, outcome).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from pillm.core.records import atomic_path, write_json
from pillm.data.files import MIRROR_FILES, DataError, hub_call, pinned, sha256_file

LOCK = ".mirror.lock"


def content_digest(path: Path) -> str:
    """Digest of a parquet file's rows, independent of its container bytes: sha256 over
    ``sha256(image bytes)<TAB>label`` lines in file order (the image column is the non-label one).
    """
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    col = next(c for c in table.column_names if c != "label")
    h = hashlib.sha256()
    images, labels = table.column(col).to_pylist(), table.column("label").to_pylist()
    for im, label in zip(images, labels, strict=True):
        h.update(f"{hashlib.sha256(im['bytes']).hexdigest()}\t{label}\n".encode())
    return h.hexdigest()


def _content_group(root: Path, rel: str) -> str:
    """The content digest a ``content`` file is checked by: parquet, ``content_digest``; TSV,
    sha256 over the data lines of its folder's ``content`` TSVs together, sorted."""
    if rel.endswith(".parquet"):
        return content_digest(root / rel)
    group = sorted(
        r for r, f in MIRROR_FILES.items() if f.check == "content" and r.endswith(".tsv")
    )
    group = [r for r in group if r.split("/")[0] == rel.split("/")[0]]
    rows = []
    for r in group:
        rows += [x for x in (root / r).read_text(encoding="utf-8").split("\n")[1:] if x]
    return hashlib.sha256("".join(r + "\n" for r in sorted(rows)).encode()).hexdigest()


# ------------------------------------------------------------------------------ hub loads


def load_split(key: str, split: str):
    """``datasets.load_dataset`` of hub source ``key``'s ``split`` at its pinned revision."""
    import datasets

    hub = pinned(key)
    return hub_call(
        f"{hub.repo_id!r} split {split!r}",
        datasets.load_dataset,
        hub.repo_id,
        hub.config,
        split=split,
        revision=hub.revision,
    )


def download(key: str, filename: str) -> Path:
    """``hf_hub_download`` of one file of hub source ``key`` at its pinned revision."""
    from huggingface_hub import hf_hub_download

    hub = pinned(key)
    return Path(
        hub_call(
            f"{hub.repo_id}/{filename}",
            hf_hub_download,
            hub.repo_id,
            filename,
            repo_type=hub.repo_type,
            revision=hub.revision,
        )
    )


# ------------------------------------------------------------------------------ writers


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def _tsv(sentences, labels) -> str:
    return "sentence\tlabel\n" + "".join(
        f"{s}\t{int(y)}\n" for s, y in zip(sentences, labels, strict=True)
    )


def _write_images(path: Path, ds, column: str) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = ds.cast_column(column, datasets.Image(decode=False)).with_format("arrow")[:]
    out = pa.table({column: table.column(column), "label": table.column("label").cast(pa.int64())})
    with atomic_path(path) as tmp:
        pq.write_table(out, tmp)


def build_dataset(key: str, root: Path) -> None:
    """Write the mirror files of hub source ``key`` under ``root`` (not checked here)."""
    if key == "wikitext2":
        for split in ("validation", "test"):
            rows = load_split(key, split)["text"]
            _write_text(root / f"wikitext-2-v1/{split}.txt", "".join(r or " \n" for r in rows))
    elif key == "ptb":
        for split in ("validation", "test"):
            rows = load_split(key, split)["sentence"]
            _write_text(root / f"ptb/{split}.txt", "".join(f" {s} \n" for s in rows))
    elif key == "tinyshakespeare":
        parts = [t for s in ("train", "validation", "test") for t in load_split(key, s)["text"]]
        _write_text(root / "tinyshakespeare/input.txt", "".join(parts))
    elif key == "lambada":
        rows = load_split(key, "test")["text"]
        lines = "".join(json.dumps({"text": t}) + "\n" for t in rows)
        _write_text(root / "lambada/lambada_test.jsonl", lines)
    elif key == "sst2":
        for split, rel in (("validation", "sst2/test.tsv"), ("train", "sst2/train.tsv")):
            ds = load_split(key, split)
            _write_text(root / rel, _tsv(ds["sentence"], ds["label"]))
        _write_text(root / "sst2/dev.tsv", _tsv([], []))
    elif key in ("mnist", "cifar10"):
        column = "image" if key == "mnist" else "img"
        for split in ("train", "test"):
            _write_images(root / f"{key}/{split}.parquet", load_split(key, split), column)
    elif key == "gpt2-tokenizer":
        for name in ("vocab.json", "merges.txt"):
            _write_bytes(root / f"gpt2-tokenizer/{name}", download(key, name).read_bytes())
    else:
        raise DataError(f"no mirror builder for hub source {key!r}")


def check_file(root: Path, rel: str) -> dict:
    """Check one built file against ``MIRROR_FILES[rel]``; a failed check raises DataError."""
    spec, hub = MIRROR_FILES[rel], pinned(MIRROR_FILES[rel].dataset)
    digest = sha256_file(root / rel)
    record = {"repo": hub.repo_id, "revision": hub.revision, "check": spec.check}
    record.update(sha256=digest, mirror_sha256=spec.sha256, note=spec.note)
    where = f"{root / rel} (built from {hub.repo_id}@{hub.revision})"
    if spec.check == "bytes" and digest != spec.sha256:
        raise DataError(
            f"{where} is not byte-identical to the offline mirror's file: sha256 {digest}, "
            f"expected {spec.sha256}. The hub's data at that revision differs from the mirror; "
            "pin the revision the mirror was made from, or use the offline mirror "
            "(data.local_dir)."
        )
    if spec.check == "content":
        got = _content_group(root, rel)
        if got != spec.content_sha256:
            raise DataError(
                f"{where} does not hold the offline mirror's rows: content digest {got}, "
                f"expected {spec.content_sha256} (pillm.data.mirror.content_digest)."
            )
    record["same_bytes_as_mirror"] = digest == spec.sha256
    return record


def build_mirror(root: str | os.PathLike, datasets: list[str] | None = None) -> Path:
    """Build the mirror (all hub sources, or ``datasets``) under ``root``; return ``root``.

    Writes every file, checks it, then ``MIRROR.json`` and last ``SHA256SUMS`` (its presence
    marks a finished mirror)."""
    root = Path(root)
    keys = sorted({f.dataset for f in MIRROR_FILES.values() if f.check != "skipped"})
    for key in datasets or keys:
        if key not in keys:
            raise DataError(f"unknown mirror dataset {key!r}; known: {keys}")
    keys = [k for k in keys if datasets is None or k in datasets]
    for key in keys:
        pinned(key)  # every revision is known before anything is downloaded
    for key in keys:
        build_dataset(key, root)
    built = [
        r for r, f in sorted(MIRROR_FILES.items()) if f.dataset in keys and f.check != "skipped"
    ]
    records = {rel: check_file(root, rel) for rel in built}
    skipped = {r: f.note for r, f in MIRROR_FILES.items() if f.check == "skipped"}
    write_json(root / "MIRROR.json", {"files": records, "not_built": skipped})
    sums = "".join(f"{records[rel]['sha256']}  ./{rel}\n" for rel in built)
    _write_text(root / "SHA256SUMS", sums)
    return root


def ensure_mirror(local_dir: str | os.PathLike) -> Path:
    """``local_dir`` when it holds a mirror (SHA256SUMS), else the mirror built there from the
    hub (one process builds, the others wait on a lock and then read it)."""
    root = Path(local_dir)
    if (root / "SHA256SUMS").is_file():
        return root
    try:
        for key in {f.dataset for f in MIRROR_FILES.values() if f.check != "skipped"}:
            pinned(key)  # before anything is created at local_dir
    except DataError as err:
        raise DataError(
            f"data.source is 'auto' and data.local_dir={root} holds no mirror (no SHA256SUMS); "
            f"building it there from the hub needs pinned revisions: {err}"
        ) from err
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "SHA256SUMS").is_file():
            return root
        try:
            return build_mirror(root)
        except DataError as err:
            raise DataError(
                f"data.source is 'auto' and data.local_dir={root} holds no mirror (no "
                f"SHA256SUMS), so it is built there from the hub, which failed: {err}"
            ) from err
