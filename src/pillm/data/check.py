"""Before a run: is the ``data`` section usable, and what will the run download?

``check_data_config`` stops a config whose data cannot be read (a ``local`` source with no
mirror, a revision that is not a commit) before any job, naming the key and the fix.
``download_plan`` says, in a few lines, where the data comes from, what will be downloaded
(which repositories, at which revisions, about how much) and what differs from the offline
mirror. Neither touches the network: a revision left null is reported as "resolved at the first
build", not resolved here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pillm.data.config import DataConfig
from pillm.data.files import (
    ENV,
    HOW_TO_POINT,
    HUB_DATASETS,
    DataConfigError,
    data_dir,
    default_data_dir,
    hub_offline,
    where,
)
from pillm.data.revisions import mirror_json, pins

SOURCES = ("auto", "local", "hub")
HOLDS_MIRROR = "SHA256SUMS"


def check_data_config(data: Mapping[str, Any]) -> Path:
    """Check the config's ``data`` section before any job; return the data folder.

    Raises ``DataConfigError`` (a ``ConfigError`` and a ``DataError``) naming the key and the
    fix: an unknown key or source, a revision that is not a 40-hex commit, a data folder that is
    not a folder, or ``data.source: local`` with no mirror in the data folder
    (``data.local_dir``, else ``$PILLM_DATA``, else ``~/.cache/pillm/data``)."""
    cfg = DataConfig.from_dict(dict(data), "data")
    if cfg.source not in SOURCES:
        raise DataConfigError(
            f"data.source must be one of {', '.join(SOURCES)}, got {cfg.source!r}"
        )
    pins(cfg.revisions)  # names a revision that is not a commit
    folder = data_dir(cfg.local_dir)
    if folder.exists() and not folder.is_dir():
        raise DataConfigError(
            f"the data folder {folder} ({where(cfg.local_dir)}) is a file, not a folder: "
            f"{HOW_TO_POINT}."
        )
    if cfg.source == "local" and not (folder / HOLDS_MIRROR).is_file():
        state = "does not exist" if not folder.exists() else f"holds no {HOLDS_MIRROR}"
        raise DataConfigError(
            f"data.source is 'local' but the data folder {folder} ({where(cfg.local_dir)}) "
            f"{state}, so there is no mirror to read. Fix: {HOW_TO_POINT}; or set "
            "data.source: auto to build the mirror there from the Hugging Face hub."
        )
    return folder


def split_bytes(data: Mapping[str, Any], corpus: str) -> dict[str, int] | None:
    """Bytes of ``corpus``'s train/valid/test splits as a build will cut them, where that is
    known before any job: from the mirror in the data folder (``data.source`` local or auto).
    None otherwise (the hub's splits, a mirror not built yet, a file missing).

    Both tokenizers are byte-level BPE, so a split has at most as many tokens as bytes: a
    window longer than a split's bytes (``model.context``, ``probe.seq_len``) cannot fit in it.
    """
    from pillm.data.sources import CORPORA, split_tail

    cfg = DataConfig.from_dict(dict(data), "data")
    folder = data_dir(cfg.local_dir)
    if cfg.source == "hub" or not (folder / HOLDS_MIRROR).is_file():
        return None
    files = {}
    for key, rel in CORPORA[corpus].local_files.items():
        path = folder / rel
        if not path.is_file():
            return None
        files[key] = path.read_bytes().decode("utf-8", errors="replace")
    if "all" in files:  # as sources.load_local cuts a single file
        body, test = split_tail(files["all"], 0.05)
        train, valid = split_tail(body, 0.05 / 0.95)
    else:
        train, valid = split_tail(files["validation"], cfg.heldout_fraction)
        test = files["test"]
    texts = {"train": train, "valid": valid, "test": test}
    return {split: len(text.encode("utf-8")) for split, text in texts.items()}


def _size(keys: Iterable[str]) -> str:
    mb = sum(HUB_DATASETS[k].mb for k in keys)
    return f"about {mb:.0f} MB" if mb >= 10 else f"about {mb:.1f} MB"


def _sources(keys: list[str], revisions: Any) -> list[str]:
    """One line per hub source: repository, revision (or how it will be resolved), size."""
    pinned = pins(revisions)
    out = []
    for key in keys:
        hub = HUB_DATASETS[key]
        rev = pinned[key] or f"the current commit of {hub.branch}, resolved then and recorded"
        config = f" ({hub.config})" if hub.config else ""
        out.append(f"    {key}: {hub.repo_id}{config} @ {rev}, {_size([key])}")
    return out


def _differences(keys: list[str], corpus: str | None) -> list[str]:
    notes = [f"  differs from the offline mirror: {HUB_DATASETS[k].note}" for k in keys
             if HUB_DATASETS[k].note]  # fmt: skip
    if corpus in ("wikitext2", "ptb"):
        notes.append(
            f"  differs from the offline mirror: {corpus} trains on the hub's full train split "
            "(the mirror has none: it trains on the validation split minus a held-out tail); "
            "every table names the policy it used"
        )
    return notes


def download_plan(data: Mapping[str, Any], needs: Iterable[str] | None = None) -> list[str]:
    """What the run will download and what differs from the offline mirror, as lines for
    ``pillm plan``. ``needs``: the hub sources (keys of ``HUB_DATASETS``) the run's jobs read
    with ``data.source: hub`` (None: all); ``auto`` builds the whole mirror whatever the run
    reads. Nothing here touches the network."""
    cfg = DataConfig.from_dict(dict(data), "data")
    folder = data_dir(cfg.local_dir)
    chosen = where(cfg.local_dir)
    keys = sorted(HUB_DATASETS) if needs is None else sorted(set(needs) & set(HUB_DATASETS))
    has_mirror = (folder / HOLDS_MIRROR).is_file()
    offline = hub_offline()
    if cfg.source in ("auto", "local") and has_mirror:
        built = mirror_json(folder)
        lines = [f"data: the mirror in {folder} ({chosen}); nothing is downloaded, every file "
                 "is checked against its SHA256SUMS"]  # fmt: skip
        if built is None:
            return lines + ["  the offline mirror (no hub revision): WikiText-2/PTB train on "
                            "the validation split minus a held-out tail"]  # fmt: skip
        lines.append(f"  built from the hub ({built.get('built', 'date not recorded')}):")
        pinned = pins(cfg.revisions)
        for key, rec in sorted(built.get("revisions", {}).items()):
            if key not in HUB_DATASETS:
                continue
            line = f"    {key}: {rec['repo']} @ {rec['revision']}"
            if pinned.get(key) and pinned[key] != rec["revision"]:
                line += (f" (data.revisions.{key} is {pinned[key]}: delete {folder} to rebuild "
                         "it at that commit)")  # fmt: skip
            lines.append(line)
        return lines + _differences(sorted(built.get("revisions", {})), None)
    if cfg.source == "local":
        return [f"data: no mirror in {folder} ({chosen}): the run stops before any job "
                f"(data.source: local). Fix: {HOW_TO_POINT}."]  # fmt: skip
    if cfg.source == "auto":
        keys = sorted(HUB_DATASETS)  # the mirror holds every source
        lines = [
            f"data: no mirror in {folder} ({chosen}): the first job builds it there from the "
            f"Hugging Face hub, {_size(keys)} in all:",
            *_sources(keys, cfg.revisions),
            "  every file is checked against the committed digests (a mismatch stops the "
            "build, naming the file); the revisions used are recorded in its MIRROR.json",
        ]
        lines += _differences(keys, None)
    else:
        lines = [
            f"data: read from the Hugging Face hub by each job (data.source: hub; cached by "
            f"`datasets` under HF_HOME), {_size(keys)} in all:",
            *_sources(keys, cfg.revisions),
            "  the revisions used are recorded in every corpus and token meta.json",
        ]
        lines += _differences(keys, cfg.corpus)
    if offline:
        lines.append("  HF_HUB_OFFLINE is set: only what the hub cache already holds can be "
                     f"read; offline, {HOW_TO_POINT}")  # fmt: skip
    elif folder == default_data_dir() and not os.environ.get(ENV):
        lines.append(f"  to use an offline mirror instead: {HOW_TO_POINT}")
    return lines
