"""Corpora, and where every data file comes from: the local mirror or the Hugging Face hub.

Three sources, one result: ``train``/``valid``/``test`` text plus a record of where it came from.
The data folder is ``data.local_dir``, else ``$PILLM_DATA``, else ``~/.cache/pillm/data``
(``files.data_dir``).

- ``auto`` (the default): the mirror in the data folder when it holds one (a ``SHA256SUMS``
  file; every file read is checked against it), else that mirror built there from the hub first
  (``pillm.data.mirror``: the revisions of ``data.revisions``, the same files, checked against
  ``MIRROR_FILES``), so online and offline users feed the same inputs to the same rules.
- ``local``: a folder laid out like the offline mirror (``shared/data``), every file checked
  against its ``SHA256SUMS``. The mirror has no WikiText-2/PTB train split, so the policy there is
  "train on the validation split minus a held-out tail, select on the tail, report on test"; the
  policy string travels into every metrics record so tables can say which one was used.
- ``hub``: the hub's own train/validation/test splits of the same datasets (WikiText-2's full
  train split), at the revisions of ``data.revisions`` (``pillm.data.revisions``).

Every record says which hub revision the data came from (``revisions``: per source, repository,
revision and how it was chosen; none for the offline mirror). Offline detection is
``huggingface_hub``'s own: ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, proxies and a warm cache all
behave as the hub library makes them; its offline/connection errors become a ``DataError``
naming ``data.local_dir`` (``hub_call``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pillm.core.records import write_json
from pillm.data.files import (
    MIRROR_FILES,
    DataError,
    data_dir,
    hub_call,
    read_checksums,
    verify_file,
)
from pillm.data.reading import read_text
from pillm.data.revisions import Revisions, hub_source, local_record, mirror_json

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus lives locally and on the hub."""

    local_files: dict[str, str]  # mirror-relative paths: "validation"/"test" or "all"
    hub_text_column: str  # the hub repository and revision: HUB_DATASETS[name]
    display: str  # its name in tables, figures and the paper's text


CORPORA: dict[str, CorpusSpec] = {
    "wikitext2": CorpusSpec(
        {"validation": "wikitext-2-v1/validation.txt", "test": "wikitext-2-v1/test.txt"},
        "text",
        "WikiText-2",
    ),
    "ptb": CorpusSpec(
        {"validation": "ptb/validation.txt", "test": "ptb/test.txt"},
        "sentence",
        "PTB",
    ),
    "tinyshakespeare": CorpusSpec(
        {"all": "tinyshakespeare/input.txt"},
        "text",
        "Tiny Shakespeare",
    ),
}
CORPUS_NAMES = {name: spec.display for name, spec in CORPORA.items()}


def split_tail(text: str, heldout_fraction: float) -> tuple[str, str]:
    """Split text at a line boundary: the first (1 - f) of lines, and the held-out tail."""
    lines = text.splitlines(keepends=True)
    cut = len(lines) - max(1, round(len(lines) * heldout_fraction))
    return "".join(lines[:cut]), "".join(lines[cut:])


def load_local(
    name: str, local_dir: str | os.PathLike, heldout_fraction: float
) -> tuple[dict, dict]:
    """The corpus from the mirror at ``local_dir`` (checked), its policy and provenance."""
    spec = CORPORA[name]
    local_dir = Path(local_dir)
    checksums = read_checksums(local_dir)
    digests = {rel: verify_file(local_dir, rel, checksums) for rel in spec.local_files.values()}
    files = {k: read_text(local_dir / rel) for k, rel in spec.local_files.items()}
    if "all" in files:  # a single file: contiguous 90/5/5 split by lines
        body, test = split_tail(files["all"], 0.05)
        train, valid = split_tail(body, 0.05 / 0.95)
        policy = f"local:{name}:train=first 90% of lines, valid=next 5%, test=last 5%"
    else:
        train, valid = split_tail(files["validation"], heldout_fraction)
        test = files["test"]
        pct = round(100 * heldout_fraction)
        policy = f"local:{name}:train=validation split minus {pct}% tail, valid=that tail, test=test split"
    meta = {"source": "local", "local_dir": str(local_dir.resolve()), "sha256": digests}
    meta["built_from_hub"] = (local_dir / "MIRROR.json").is_file()  # pillm.data.mirror's record
    record = local_record(local_dir, name)
    meta.update(hub_id=record["repo"], revision=record["revision"], revisions={name: record})
    return {"train": train, "valid": valid, "test": test}, {"policy": policy, **meta}


def resolve_source(
    source: str, local_dir: str | os.PathLike | None, revisions: Revisions = None
) -> tuple[str, str]:
    """``(source, folder)`` with ``auto`` resolved: ("local", the mirror) or ("hub", the data
    folder). ``local_dir``: ``data.local_dir`` ("" or None: ``$PILLM_DATA``, else the cache).

    ``auto``: the mirror in the data folder when it holds SHA256SUMS (files are checked on
    read), else that mirror built there from the hub first at ``revisions``
    (``pillm.data.mirror.ensure_mirror``).
    """
    folder = data_dir(local_dir)
    if source == "auto":
        from pillm.data.mirror import ensure_mirror

        return "local", str(ensure_mirror(folder, revisions))
    if source in ("local", "hub"):
        return source, str(folder)
    raise DataError(f"data.source must be 'auto', 'local' or 'hub', got {source!r}")


def load_hub(name: str, revisions: Revisions = None) -> tuple[dict, dict]:
    """The corpus's train/validation/test splits from the hub at its revision."""
    spec = CORPORA[name]
    hub = hub_source(name, revisions)
    import datasets

    ds = hub_call(
        repr(hub.repo_id), datasets.load_dataset, hub.repo_id, hub.config, revision=hub.revision
    )
    hub_split = {"train": "train", "valid": "validation", "test": "test"}
    texts = {}
    for split, hub_name in hub_split.items():
        rows = ds[hub_name][spec.hub_text_column]
        texts[split] = "".join(r if r.endswith("\n") else r + "\n" for r in rows)
    policy = f"hub:{hub.repo_id}:{hub.config}@{hub.revision}:train/validation/test splits"
    return texts, {
        "policy": policy,
        "source": "hub",
        "hub_id": hub.repo_id,
        "revision": hub.revision,
        "revisions": {name: hub.record()},
        "fingerprint": {s: ds[h]._fingerprint for s, h in hub_split.items()},
    }


def load_corpus(
    name: str,
    source: str,
    local_dir: str | None,
    heldout_fraction: float,
    revisions: Revisions = None,
) -> tuple[dict, dict]:
    """Return ({split: text}, meta) for a corpus; meta['policy'] names the data policy and
    meta['revisions'] the hub revision it came from."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; known: {sorted(CORPORA)}")
    source, local_dir = resolve_source(source, local_dir, revisions)
    if source == "local":
        texts, meta = load_local(name, local_dir, heldout_fraction)
    else:
        texts, meta = load_hub(name, revisions)
    meta["corpus"] = name
    meta["bytes"] = {s: len(texts[s].encode("utf-8")) for s in SPLITS}
    meta["lines"] = {s: texts[s].count("\n") for s in SPLITS}
    return texts, meta


def mirror_job(source: str, local_dir: str | None, out: str, revisions: Revisions = None) -> None:
    """Rule ``mirror``: make sure the data the rules read is there and intact, and say where.

    ``auto`` builds the mirror in the data folder from the hub when it holds none; ``local`` and
    ``auto`` then check every file of its SHA256SUMS (``sha256sum -c``). ``hub`` has no mirror:
    the record says so. Writes ``out`` (JSON): the folder, its files' digests, whether it was
    built from the hub (its MIRROR.json) and the revision of every source it holds."""
    resolved, root = resolve_source(source, local_dir, revisions)
    record: dict = {"source": source, "resolved": resolved}
    if resolved == "local":
        root_path = Path(root)
        sums = read_checksums(root_path)
        record["local_dir"] = str(root_path.resolve())
        record["sha256"] = {rel: verify_file(root_path, rel, sums) for rel in sorted(sums)}
        record["built_from_hub"] = mirror_json(root_path)
        keys = sorted({MIRROR_FILES[r].dataset for r in sums if r in MIRROR_FILES})
        record["revisions"] = {key: local_record(root_path, key) for key in keys}
    write_json(Path(out), record)
