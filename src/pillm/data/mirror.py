"""Build the offline mirror's layout from the Hugging Face hub (rule ``mirror``, ``data.source: auto``).

Every file of ``files.MIRROR_FILES`` is written under the same name and in the same format as
in the offline mirror, from the hub repositories of ``files.HUB_DATASETS`` at the revisions of
``data.revisions`` (a null one resolved first, before anything is downloaded:
``revisions.hub_source``), then checked as its ``check`` says: ``bytes`` against the committed
sha256, ``content`` against the committed content digest (``content_digest``), ``differs``
recorded as different, ``skipped`` not built. A failed check stops the build naming the file and
revision. The result is a folder the ``local`` source reads: its own ``SHA256SUMS`` (the digests
of the files written) and ``MIRROR.json`` (per source: repository, revision and how it was
chosen; per file: repository, revision, check, outcome).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path

from pillm.core.records import atomic_path, write_json
from pillm.data.files import MIRROR_FILES, DataError, hub_call, sha256_file
from pillm.data.reading import read_parquet, read_text
from pillm.data.revisions import HubSource, Revisions, hub_source

LOCK = ".mirror.lock"


def content_digest(path: Path) -> str:
    """Digest of a parquet file's rows, independent of its container bytes: sha256 over
    ``sha256(image bytes)<TAB>label`` lines in file order (the image column is the non-label one).
    """
    table = read_parquet(path)
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
        rows += [x for x in read_text(root / r, allow_empty=True).split("\n")[1:] if x]
    return hashlib.sha256("".join(r + "\n" for r in sorted(rows)).encode()).hexdigest()


# ------------------------------------------------------------------------------ hub loads


def load_split(hub: HubSource, split: str):
    """``datasets.load_dataset`` of ``hub``'s ``split`` at its revision."""
    import datasets

    return hub_call(
        f"{hub.repo_id!r} split {split!r}",
        datasets.load_dataset,
        hub.repo_id,
        hub.config,
        split=split,
        revision=hub.revision,
    )


def download(hub: HubSource, filename: str) -> Path:
    """``hf_hub_download`` of one file of ``hub`` at its revision."""
    from huggingface_hub import hf_hub_download

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


def build_dataset(hub: HubSource, root: Path) -> None:
    """Write the mirror files of hub source ``hub`` under ``root`` (not checked here)."""
    key = hub.key
    if key == "wikitext2":
        for split in ("validation", "test"):
            rows = load_split(hub, split)["text"]
            _write_text(root / f"wikitext-2-v1/{split}.txt", "".join(r or " \n" for r in rows))
    elif key == "ptb":
        for split in ("validation", "test"):
            rows = load_split(hub, split)["sentence"]
            _write_text(root / f"ptb/{split}.txt", "".join(f" {s} \n" for s in rows))
    elif key == "tinyshakespeare":
        parts = [t for s in ("train", "validation", "test") for t in load_split(hub, s)["text"]]
        _write_text(root / "tinyshakespeare/input.txt", "".join(parts))
    elif key == "lambada":
        rows = load_split(hub, "test")["text"]
        lines = "".join(json.dumps({"text": t}) + "\n" for t in rows)
        _write_text(root / "lambada/lambada_test.jsonl", lines)
    elif key == "sst2":
        for split, rel in (("validation", "sst2/test.tsv"), ("train", "sst2/train.tsv")):
            ds = load_split(hub, split)
            _write_text(root / rel, _tsv(ds["sentence"], ds["label"]))
        _write_text(root / "sst2/dev.tsv", _tsv([], []))
    elif key in ("mnist", "cifar10"):
        column = "image" if key == "mnist" else "img"
        for split in ("train", "test"):
            _write_images(root / f"{key}/{split}.parquet", load_split(hub, split), column)
    elif key == "gpt2_tokenizer":
        for name in ("vocab.json", "merges.txt"):
            _write_bytes(root / f"gpt2-tokenizer/{name}", download(hub, name).read_bytes())
    else:
        raise DataError(f"no mirror builder for hub source {key!r}")


def check_file(root: Path, rel: str, hub: HubSource) -> dict:
    """Check one file built from ``hub`` against ``MIRROR_FILES[rel]``; a failed check raises
    DataError naming the file and the revision."""
    spec = MIRROR_FILES[rel]
    digest = sha256_file(root / rel)
    record = {"repo": hub.repo_id, "revision": hub.revision, "check": spec.check}
    record.update(sha256=digest, mirror_sha256=spec.sha256, note=spec.note)
    where = f"{root / rel} (built from {hub.repo_id}@{hub.revision}, {hub.how})"
    if spec.check == "bytes" and digest != spec.sha256:
        raise DataError(
            f"{where} is not byte-identical to the offline mirror's file: sha256 {digest}, "
            f"expected {spec.sha256}. The hub's data at that revision differs from the mirror; "
            f"pin data.revisions.{hub.key} to the commit the mirror was made from, or use the "
            "offline mirror (data.local_dir or PILLM_DATA)."
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


def mirror_keys() -> list[str]:
    """The hub sources a mirror is built from (every one with a file that is built)."""
    return sorted({f.dataset for f in MIRROR_FILES.values() if f.check != "skipped"})


def resolve_all(keys: list[str], revisions: Revisions = None) -> dict[str, HubSource]:
    """Every source of ``keys`` at its revision: unpinned ones resolved now, before anything is
    downloaded or created, so one build reads one commit per source."""
    return {key: hub_source(key, revisions) for key in keys}


def build_mirror(
    root: str | os.PathLike,
    datasets: list[str] | None = None,
    revisions: Revisions = None,
    resolved: dict[str, HubSource] | None = None,
) -> Path:
    """Build the mirror (all hub sources, or ``datasets``) under ``root``; return ``root``.

    ``revisions``: ``data.revisions`` (None: the committed pins); ``resolved``: sources already
    resolved (``resolve_all``). Writes every file, checks it, then ``MIRROR.json`` and last
    ``SHA256SUMS`` (its presence marks a finished mirror)."""
    root = Path(root)
    unknown = sorted(set(datasets or ()) - set(mirror_keys()))
    if unknown:
        raise DataError(f"unknown mirror dataset(s) {unknown}; known: {mirror_keys()}")
    keys = [k for k in mirror_keys() if datasets is None or k in datasets]
    hubs = resolved or resolve_all(keys, revisions)
    for key in keys:
        build_dataset(hubs[key], root)
    built = [
        r for r, f in sorted(MIRROR_FILES.items()) if f.dataset in keys and f.check != "skipped"
    ]
    records = {rel: check_file(root, rel, hubs[MIRROR_FILES[rel].dataset]) for rel in built}
    skipped = {r: f.note for r, f in MIRROR_FILES.items() if f.check == "skipped"}
    write_json(
        root / "MIRROR.json",
        {
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "revisions": {key: hubs[key].record() for key in keys},
            "files": records,
            "not_built": skipped,
        },
    )
    sums = "".join(f"{records[rel]['sha256']}  ./{rel}\n" for rel in built)
    _write_text(root / "SHA256SUMS", sums)
    return root


def ensure_mirror(local_dir: str | os.PathLike, revisions: Revisions = None) -> Path:
    """``local_dir`` when it holds a mirror (SHA256SUMS), else the mirror built there from the
    hub (one process builds, the others wait on a lock and then read it). Unpinned revisions are
    resolved before anything is created at ``local_dir``."""
    root = Path(local_dir)
    if (root / "SHA256SUMS").is_file():
        return root
    what = (
        f"data.source is 'auto' and the data folder {root} holds no mirror (no SHA256SUMS), so "
        "it is built there from the hub"
    )
    try:
        resolved = resolve_all(mirror_keys(), revisions)
    except DataError as err:
        raise DataError(f"{what}, which needs every revision first: {err}") from err
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "SHA256SUMS").is_file():
            return root
        try:
            return build_mirror(root, resolved=resolved)
        except DataError as err:
            raise DataError(f"{what}, which failed: {err}") from err
