"""Corpora, and where every data file comes from: the local mirror or the Hugging Face hub.

Three sources, one result: ``train``/``valid``/``test`` text plus a record of where it came from.

- ``auto`` (the default): the mirror at ``data.local_dir`` when it holds one (a ``SHA256SUMS``
  file; every file read is checked against it), else that mirror built there from the hub first
  (``pillm.data.mirror``: pinned revisions, the same files, checked against ``MIRROR_FILES``), so
  online and offline users feed the same inputs to the same rules.
- ``local``: a directory laid out like the offline mirror (``shared/data``), every file checked
  against its ``SHA256SUMS``. The mirror has no WikiText-2/PTB train split, so the policy there is
  "train on the validation split minus a held-out tail, select on the tail, report on test"; the
  policy string travels into every metrics record so tables can say which one was used.
- ``hub``: the hub's own train/validation/test splits of the same datasets (WikiText-2's full
  train split), at the revisions pinned in ``HUB_DATASETS``.

Offline detection is ``huggingface_hub``'s own: ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, proxies and
a warm cache all behave as the hub library makes them; its offline/connection errors become a
``DataError`` naming ``data.local_dir`` (``hub_call``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus lives locally and on the hub."""

    local_files: dict[str, str]  # mirror-relative paths: "validation"/"test" or "all"
    hub_text_column: str  # the hub repository and revision: HUB_DATASETS[name]


CORPORA: dict[str, CorpusSpec] = {
    "wikitext2": CorpusSpec(
        {"validation": "wikitext-2-v1/validation.txt", "test": "wikitext-2-v1/test.txt"},
        "text",
    ),
    "ptb": CorpusSpec(
        {"validation": "ptb/validation.txt", "test": "ptb/test.txt"},
        "sentence",
    ),
    "tinyshakespeare": CorpusSpec(
        {"all": "tinyshakespeare/input.txt"},
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
    meta["built_from_hub"] = (local_dir / "MIRROR.json").is_file()  # pillm.data.mirror's record
    return {"train": train, "valid": valid, "test": test}, {"policy": policy, **meta}


@dataclass(frozen=True)
class HubDataset:
    """One hub repository the data comes from, pinned to a commit."""

    repo_id: str
    repo_type: str  # "dataset" or "model"
    config: str | None
    revision: str | None  # a 40-hex commit; None: not pinned yet, and every hub load refuses


# One table of hub sources. The revisions are commits of the hub repositories; none could be
# resolved on the machine this table was written on (no network), so they are None and every hub
# load stops with the command that resolves them (``pin_command``). Fill them in once, online.
HUB_DATASETS: dict[str, HubDataset] = {
    "wikitext2": HubDataset("Salesforce/wikitext", "dataset", "wikitext-2-v1", None),
    "ptb": HubDataset("ptb-text-only/ptb_text_only", "dataset", None, None),
    "tinyshakespeare": HubDataset("karpathy/tiny_shakespeare", "dataset", None, None),
    "lambada": HubDataset("EleutherAI/lambada_openai", "dataset", "default", None),
    "sst2": HubDataset("nyu-mll/glue", "dataset", "sst2", None),
    "mnist": HubDataset("ylecun/mnist", "dataset", None, None),
    "cifar10": HubDataset("uoft-cs/cifar10", "dataset", None, None),
    "gpt2-tokenizer": HubDataset("openai-community/gpt2", "model", None, None),
}


@dataclass(frozen=True)
class MirrorFile:
    """A file of the offline mirror and how ``pillm.data.mirror`` rebuilds it from the hub.

    ``check``: ``bytes``: rebuilt byte for byte, its sha256 must equal ``sha256`` (the mirror's
    SHA256SUMS) or the build stops. ``content``: the same rows in another container (parquet
    bytes depend on the writer), so ``content_sha256`` (see ``mirror.content_digest``) must
    match. ``differs``: cannot be the same (``note`` says why); built from the hub anyway and
    recorded as different in the built mirror's MIRROR.json. ``skipped``: read by no rule, not
    built.
    """

    dataset: str  # key of HUB_DATASETS
    sha256: str
    check: str
    content_sha256: str | None = None
    note: str = ""


MIRROR_FILES: dict[str, MirrorFile] = {
    "wikitext-2-v1/validation.txt": MirrorFile(
        "wikitext2",
        "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        "bytes",
        note="rows joined; an empty row is the file's blank line ' '",
    ),
    "wikitext-2-v1/test.txt": MirrorFile(
        "wikitext2",
        "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        "bytes",
        note="rows joined; an empty row is the file's blank line ' '",
    ),
    "ptb/validation.txt": MirrorFile(
        "ptb",
        "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
        "bytes",
        note="one ' sentence ' line per row, as in Mikolov's files",
    ),
    "ptb/test.txt": MirrorFile(
        "ptb",
        "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
        "bytes",
        note="one ' sentence ' line per row, as in Mikolov's files",
    ),
    "tinyshakespeare/input.txt": MirrorFile(
        "tinyshakespeare",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        "bytes",
        note="the hub's train, validation and test texts, concatenated",
    ),
    "lambada/lambada_test.jsonl": MirrorFile(
        "lambada",
        "4aa8d02cd17c719165fc8a7887fddd641f43fcafa4b1c806ca8abc31fabdb226",
        "bytes",
        note='one json.dumps({"text": ...}) line per test passage',
    ),
    "lambada/lambada_test_plain_text.txt": MirrorFile(
        "lambada",
        "4ab6062b68422bf2e83653d367c9765d42404f7ec21b8b59b6518b45606aaef2",
        "skipped",
        note="the original LAMBADA release's file; no rule reads it",
    ),
    "lambada/lambada_development_plain_text.txt": MirrorFile(
        "lambada",
        "f5b0f1e38fcdad6a1cd3a17bee4b6932a28cd9c5f463ada970c61de0f8679f2f",
        "skipped",
        note="the original LAMBADA release's file; no rule reads it",
    ),
    "sst2/test.tsv": MirrorFile(
        "sst2",
        "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
        "bytes",
        note="GLUE validation in the hub's order, 'sentence<TAB>label' rows under a header",
    ),
    "sst2/train.tsv": MirrorFile(
        "sst2",
        "920e317b2c52e12cd22db1da2c6708312bd7dc4f3712b9bbf1b50ee6c2c792ba",
        "content",
        "a0b1cf0ba31db6137b79ea79eeff1bb9883f919020d5d43608032b2dae359a9a",
        "the mirror splits GLUE train into train.tsv + dev.tsv in an unpublished order; built: "
        "all of GLUE train in the hub's order in train.tsv, dev.tsv a header only. The same "
        "67,349 rows (checked on train.tsv + dev.tsv sorted), so the seeded SST-2 subsets differ",
    ),
    "sst2/dev.tsv": MirrorFile(
        "sst2",
        "92353770071a2a889f75d000a38a9e541ea8f0a5499e50f040b17917a5cbf66f",
        "content",
        "a0b1cf0ba31db6137b79ea79eeff1bb9883f919020d5d43608032b2dae359a9a",
        "see sst2/train.tsv",
    ),
    "mnist/train.parquet": MirrorFile(
        "mnist",
        "16abb5324fb45513e0eec23c5af86a9e84ba50ceacc8075264b7e62edd453272",
        "content",
        "b19852ea4a5b314efe3053235b45c35f2f8e3e0a4960aeffb972ccfa494edfd1",
        "same PNG bytes and labels in the same order; the parquet container is re-written",
    ),
    "mnist/test.parquet": MirrorFile(
        "mnist",
        "fee8402700634c02bb36f242821051beda2a88f6a8332f99c9575d4be84ce659",
        "content",
        "02c1974fb26c04cb939fad78f9275e613037a0d76bb41ecbe44bef778a6ffb99",
        "same PNG bytes and labels in the same order; the parquet container is re-written",
    ),
    "cifar10/train.parquet": MirrorFile(
        "cifar10",
        "2681e3999b7710f7268c10415abd840ed6862dc05863094dd97cf4cd4e844631",
        "differs",
        note="the mirror holds lossy JPEG re-encodings sorted by label; the hub holds the "
        "original PNGs in their own order: built from the hub's PNGs, so CIFAR-10 numbers "
        "differ between a hub-built and the offline mirror",
    ),
    "cifar10/test.parquet": MirrorFile(
        "cifar10",
        "9747e75741abf8767785c83ba3722cbfce17723e081e9531d6f7dfe1ee02f845",
        "differs",
        note="see cifar10/train.parquet",
    ),
    "gpt2-tokenizer/vocab.json": MirrorFile(
        "gpt2-tokenizer",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "bytes",
        note="downloaded as is",
    ),
    "gpt2-tokenizer/merges.txt": MirrorFile(
        "gpt2-tokenizer",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        "bytes",
        note="downloaded as is",
    ),
}


def pin_command(key: str) -> str:
    h = HUB_DATASETS[key]
    kind = "dataset" if h.repo_type == "dataset" else "model"
    return f"python -c \"from huggingface_hub import HfApi; print(HfApi().{kind}_info('{h.repo_id}').sha)\""


def pinned(key: str) -> HubDataset:
    """The hub source ``key`` with its pinned revision; a DataError when it has none."""
    h = HUB_DATASETS[key]
    if not h.revision:
        raise DataError(
            f"hub source {key!r} ({h.repo_id}) has no pinned revision in "
            f"pillm.data.sources.HUB_DATASETS, and hub loads are pinned. Online, resolve one with "
            f"{pin_command(key)} and set it there; offline, set data.local_dir to the mirror "
            "(e.g. ../shared/data)."
        )
    return h


def hub_offline() -> bool:
    """``huggingface_hub``'s own offline switch (HF_HUB_OFFLINE), not a network probe.

    The hub library reads the variable once, at import; it is read again here (the hub's own
    truthy values) so a switch set later in the process, as tests do, is seen too."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(constants.HF_HUB_OFFLINE) or env in {"1", "ON", "YES", "TRUE"}


def _offline_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    return (ConnectionError, OfflineModeIsEnabled, LocalEntryNotFoundError)


def hub_call(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a hub load); the hub library's offline errors -> DataError."""
    try:
        return fn(*args, **kwargs)
    except _offline_errors() as err:
        why = "HF_HUB_OFFLINE is set" if hub_offline() else f"{type(err).__name__}: {err}"
        raise DataError(
            f"cannot load {what} from the Hugging Face hub ({why}) and it is not in the hub "
            "cache. Offline, point data.local_dir at the offline mirror (a folder with "
            "SHA256SUMS, e.g. ../shared/data) with `data.source: auto` or `data.source: local` "
            "(or pass --config data='{source: local, local_dir: ...}')."
        ) from err


def hub_reachable(*_args, **_kwargs) -> bool:
    """Deprecated (models/pretrained.py still calls it): ``not hub_offline()``, no probe."""
    return not hub_offline()


def resolve_source(source: str, local_dir: str | os.PathLike | None) -> tuple[str, str | None]:
    """``(source, local_dir)`` with ``auto`` resolved: ("local", the mirror) or ("hub", ...).

    ``auto``: the mirror at ``local_dir`` when it holds SHA256SUMS (files are checked on read),
    else that mirror built there from the hub first (``pillm.data.mirror.ensure_mirror``).
    """
    if source == "auto":
        if local_dir is None:
            raise DataError("data.source is 'auto' but data.local_dir is not set")
        from pillm.data.mirror import ensure_mirror

        return "local", str(ensure_mirror(local_dir))
    if source in ("local", "hub"):
        return source, None if local_dir is None else str(local_dir)
    raise DataError(f"data.source must be 'auto', 'local' or 'hub', got {source!r}")


def load_hub(name: str) -> tuple[dict, dict]:
    spec = CORPORA[name]
    hub = pinned(name)
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
        "fingerprint": {s: ds[h]._fingerprint for s, h in hub_split.items()},
    }


def load_corpus(
    name: str, source: str, local_dir: str, heldout_fraction: float
) -> tuple[dict, dict]:
    """Return ({split: text}, meta) for a corpus; meta['policy'] names the data policy."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; known: {sorted(CORPORA)}")
    source, local_dir = resolve_source(source, local_dir)
    if source == "local":
        texts, meta = load_local(name, local_dir, heldout_fraction)
    else:
        texts, meta = load_hub(name)
    meta["corpus"] = name
    meta["bytes"] = {s: len(texts[s].encode("utf-8")) for s in SPLITS}
    meta["lines"] = {s: texts[s].count("\n") for s in SPLITS}
    return texts, meta
