"""SST-2 (GLUE) sentences and labels, from the Hugging Face hub or the checksummed local mirror.

One result from either source: ``train`` = GLUE train (67,349 labelled phrases and sentences)
and ``validation`` = GLUE validation (872 labelled sentences, the split every result is reported
on; GLUE's test split has no labels). In the offline mirror (``shared/data/sst2``) GLUE train is
``train.tsv`` + ``dev.tsv`` and GLUE validation is ``test.tsv``; every file is checked against
``SHA256SUMS`` first. ``split_train`` then draws the seeded, disjoint subsets a job fits on and
makes its choices on (the dev split), so the 872 validation sentences never take part in any
choice.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pillm.data.files import DataError, hub_call, read_checksums, verify_file
from pillm.data.reading import read_text
from pillm.data.revisions import Revisions, hub_source, local_record
from pillm.data.sources import resolve_source

LOCAL_FILES = {"train": ("sst2/train.tsv", "sst2/dev.tsv"), "validation": ("sst2/test.tsv",)}
GLUE_SIZES = {"train": 67_349, "validation": 872}


@dataclass(frozen=True)
class Split:
    """Sentences and their binary labels (0 negative, 1 positive)."""

    sentences: list[str]
    labels: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return len(self.sentences)

    def take(self, idx: np.ndarray) -> Split:
        return Split([self.sentences[i] for i in idx], self.labels[idx])


def read_tsv(path: Path) -> Split:
    """A GLUE tsv with a ``sentence`` and a ``label`` column (quotes are literal text);
    DataError naming the file (and line) when it is not UTF-8 or lacks them."""
    text = read_text(path, allow_empty=True)  # a hub-built mirror's dev.tsv: the header alone
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    if not {"sentence", "label"} <= set(reader.fieldnames or ()):
        raise DataError(f"{path}: expected tab-separated columns 'sentence' and 'label'")
    sentences, labels = [], []
    for line, row in enumerate(reader, start=2):  # line 1: the header
        try:
            labels.append(int(row["label"]))
        except (TypeError, ValueError):
            raise DataError(f"{path}: line {line} has no integer label") from None
        sentences.append(row["sentence"].strip())
    return Split(sentences, np.array(labels, np.int64))


def load_local(local_dir: str | Path) -> tuple[dict[str, Split], dict]:
    local_dir = Path(local_dir)
    sums = read_checksums(local_dir)
    digests, splits = {}, {}
    for split, files in LOCAL_FILES.items():
        parts = []
        for rel in files:
            digests[rel] = verify_file(local_dir, rel, sums)
            parts.append(read_tsv(local_dir / rel))
        splits[split] = Split(
            [s for p in parts for s in p.sentences], np.concatenate([p.labels for p in parts])
        )
    policy = "local:sst2:train=GLUE train (train.tsv+dev.tsv), report=GLUE validation (test.tsv)"
    meta = {"source": "local", "local_dir": str(local_dir.resolve()), "sha256": digests}
    record = local_record(local_dir, "sst2")
    meta.update(revision=record["revision"], revisions={"sst2": record})
    return splits, {"policy": policy, **meta}


def load_hub(revisions: Revisions = None) -> tuple[dict[str, Split], dict]:
    hub = hub_source("sst2", revisions)
    import datasets

    what = f"{hub.repo_id!r}/{hub.config!r} (SST-2; <data.local_dir>/sst2 in the mirror)"
    ds = hub_call(what, datasets.load_dataset, hub.repo_id, hub.config, revision=hub.revision)
    splits = {
        s: Split([t.strip() for t in ds[s]["sentence"]], np.asarray(ds[s]["label"], np.int64))
        for s in GLUE_SIZES
    }
    fingerprint = {s: ds[s]._fingerprint for s in GLUE_SIZES}
    policy = (
        f"hub:{hub.repo_id}:{hub.config}@{hub.revision}:train=GLUE train, report=GLUE validation"
    )
    meta = {"policy": policy, "source": "hub", "revision": hub.revision}
    meta["revisions"] = {"sst2": hub.record()}
    return splits, {**meta, "fingerprint": fingerprint}


def load_sst2(
    source: str, local_dir: str | None, revisions: Revisions = None
) -> tuple[dict[str, Split], dict]:
    """({'train', 'validation'}: Split, meta); meta['policy'] names where the data came from,
    meta['revisions'] the hub revision (``revisions``: ``data.revisions``, None: the pins)."""
    source, local_dir = resolve_source(source, local_dir, revisions)
    splits, meta = load_local(local_dir) if source == "local" else load_hub(revisions)
    for split, n in GLUE_SIZES.items():
        if len(splits[split]) != n:
            raise DataError(f"SST-2 {split}: {len(splits[split])} rows, expected GLUE's {n}")
        if set(np.unique(splits[split].labels)) != {0, 1}:
            raise DataError(f"SST-2 {split}: labels must be 0/1")
    meta["counts"] = {s: len(splits[s]) for s in GLUE_SIZES}
    return splits, meta


def split_train(train: Split, n_train: int, n_dev: int, seed: int) -> tuple[Split, Split]:
    """Disjoint seeded subsets of GLUE train: (fit rows, dev rows). The dev rows make every
    choice (λ of the closed-form heads, LoRA's learning rate and steps).

    ``n_train`` = 0 takes every row not in the dev split. The same seed gives the same rows on
    every machine (numpy's PCG64), so every method and model fits on identical sentences.
    """
    n = len(train)
    if n_dev < 1 or n_dev >= n:
        raise ValueError(f"lora.n_dev = {n_dev} must be in [1, {n - 1}] (GLUE train: {n})")
    if n_train < 0 or n_train + n_dev > n:
        raise ValueError(
            f"lora.n_train = {n_train} + lora.n_dev = {n_dev} exceeds GLUE train ({n}): "
            "lower lora.n_train (0 takes every remaining row)"
        )
    perm = np.random.default_rng(seed).permutation(n)
    dev = perm[:n_dev]
    fit = perm[n_dev:] if n_train == 0 else perm[n_dev : n_dev + n_train]
    return train.take(np.sort(fit)), train.take(np.sort(dev))
