"""Corpora: load a text corpus from the Hugging Face hub or from a local mirror directory.

Two sources, one result: ``train``/``valid``/``test`` text plus a record of where it came from.

- ``hub``: ``datasets.load_dataset(hub_id, hub_config)`` with its own train/validation/test.
- ``local``: a directory laid out like the offline mirror (``shared/data``), every file checked
  against its ``SHA256SUMS``. The mirror has no WikiText-2/PTB train split, so the policy there is
  "train on the validation split minus a held-out tail, select on the tail, report on test"; the
  policy string travels into every metrics record so tables can say which one was used.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus lives locally and on the hub."""

    local_files: dict[str, str]  # mirror-relative paths: "validation"/"test" or "all"
    hub_id: str
    hub_config: str | None
    hub_text_column: str


CORPORA: dict[str, CorpusSpec] = {
    "wikitext2": CorpusSpec(
        {"validation": "wikitext-2-v1/validation.txt", "test": "wikitext-2-v1/test.txt"},
        "Salesforce/wikitext",
        "wikitext-2-raw-v1",
        "text",
    ),
    "ptb": CorpusSpec(
        {"validation": "ptb/validation.txt", "test": "ptb/test.txt"},
        "ptb_text_only",
        None,
        "sentence",
    ),
    "tinyshakespeare": CorpusSpec(
        {"all": "tinyshakespeare/input.txt"},
        "karpathy/tiny_shakespeare",
        None,
        "text",
    ),
}


class DataError(RuntimeError):
    """A corpus could not be loaded; the message says what to fix."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_checksums(local_dir: Path) -> dict[str, str]:
    sums = local_dir / "SHA256SUMS"
    if not sums.is_file():
        raise DataError(
            f"{sums} not found: data.local_dir must point at the offline mirror "
            "(a folder with SHA256SUMS, e.g. ../shared/data)."
        )
    table = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            table[name.strip().removeprefix("./").lstrip("*")] = digest
    return table


def verify_file(local_dir: Path, rel: str, checksums: dict[str, str]) -> str:
    """Check one mirror file against SHA256SUMS (``sha256sum -c`` semantics); return its digest."""
    path = local_dir / rel
    if not path.is_file():
        raise DataError(f"missing data file {path}: data.local_dir={local_dir} is incomplete.")
    if rel not in checksums:
        raise DataError(f"{path} has no entry in {local_dir / 'SHA256SUMS'}; cannot verify it.")
    digest = sha256_file(path)
    if digest != checksums[rel]:
        raise DataError(
            f"checksum mismatch for {path}: expected {checksums[rel]}, got {digest}. "
            "The local mirror is corrupt or altered; restore the file from the original mirror."
        )
    return digest


def split_tail(text: str, heldout_fraction: float) -> tuple[str, str]:
    """Split text at a line boundary: the first (1 - f) of lines, and the held-out tail."""
    lines = text.splitlines(keepends=True)
    cut = len(lines) - max(1, round(len(lines) * heldout_fraction))
    return "".join(lines[:cut]), "".join(lines[cut:])


def load_local(
    name: str, local_dir: str | os.PathLike, heldout_fraction: float
) -> tuple[dict, dict]:
    spec = CORPORA[name]
    local_dir = Path(local_dir)
    checksums = read_checksums(local_dir)
    digests = {rel: verify_file(local_dir, rel, checksums) for rel in spec.local_files.values()}
    files = {
        k: (local_dir / rel).read_text(encoding="utf-8") for k, rel in spec.local_files.items()
    }
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
    return {"train": train, "valid": valid, "test": test}, {"policy": policy, **meta}


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def load_hub(name: str) -> tuple[dict, dict]:
    spec = CORPORA[name]
    if not hub_reachable():
        raise DataError(
            f"cannot reach the Hugging Face hub to load {spec.hub_id!r}. Offline, set "
            "`data.source: local` and `data.local_dir: <path to the mirror, e.g. ../shared/data>` "
            "in your config (or pass --config data='{source: local, ...}')."
        )
    import datasets

    ds = datasets.load_dataset(spec.hub_id, spec.hub_config)
    hub_split = {"train": "train", "valid": "validation", "test": "test"}
    texts = {}
    for split, hub_name in hub_split.items():
        rows = ds[hub_name][spec.hub_text_column]
        texts[split] = "".join(r if r.endswith("\n") else r + "\n" for r in rows)
    policy = f"hub:{spec.hub_id}:{spec.hub_config}:train/validation/test splits"
    return texts, {
        "policy": policy,
        "source": "hub",
        "hub_id": spec.hub_id,
        "fingerprint": {s: ds[h]._fingerprint for s, h in hub_split.items()},
    }


def load_corpus(
    name: str, source: str, local_dir: str, heldout_fraction: float
) -> tuple[dict, dict]:
    """Return ({split: text}, meta) for a corpus; meta['policy'] names the data policy."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; known: {sorted(CORPORA)}")
    if source == "local":
        texts, meta = load_local(name, local_dir, heldout_fraction)
    elif source == "hub":
        texts, meta = load_hub(name)
    else:
        raise DataError(f"data.source must be 'local' or 'hub', got {source!r}")
    meta["corpus"] = name
    meta["bytes"] = {s: len(texts[s].encode("utf-8")) for s in SPLITS}
    meta["lines"] = {s: texts[s].count("\n") for s in SPLITS}
    return texts, meta
