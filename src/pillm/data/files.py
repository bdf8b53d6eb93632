"""The data files the pipeline reads and how each is checked: where the data folder is
(``data_dir``: ``data.local_dir``, else ``$PILLM_DATA``, else the user's cache), the offline
mirror's file table (committed digests, how the hub rebuilds each file), the hub repositories
(their commits are the config's: ``pillm.data.revisions``), sha256 checks against a mirror's
SHA256SUMS, and hub calls that turn huggingface_hub's offline errors into a message naming
``data.local_dir``. ``sources`` reads corpora through these; ``mirror`` builds the mirror from
them.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from pillm.core.config import ConfigError

ENV = "PILLM_DATA"  # the data folder when data.local_dir is unset
HOW_TO_POINT = (
    "point data.local_dir (in the config, or --config data='{local_dir: PATH}') or the "
    f"{ENV} environment variable at the offline mirror's folder, e.g. "
    f"data.local_dir: ../shared/data or export {ENV}=../shared/data"
)


class DataError(RuntimeError):
    """A corpus could not be loaded; the message says what to fix."""


class DataConfigError(DataError, ConfigError):
    """A ``data`` setting that cannot work (``check_data_config``): a DataError for the data
    commands, a ConfigError for the config check, which reports it before any job."""


def default_data_dir() -> Path:
    """``$XDG_CACHE_HOME/pillm/data`` (``~/.cache/pillm/data``): the user's cache, not the
    checkout, so clones, worktrees and configs share one copy and ``git clean`` keeps it."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "pillm" / "data"


def data_dir(local_dir: str | os.PathLike | None) -> Path:
    """The data folder: ``data.local_dir`` when set, else ``$PILLM_DATA`` when set, else
    ``default_data_dir()``. A relative path is the working directory's (the checkout's, under
    Snakemake)."""
    for value in (local_dir, os.environ.get(ENV)):
        if value is not None and str(value).strip():
            return Path(str(value).strip()).expanduser()
    return default_data_dir()


def where(local_dir: str | os.PathLike | None) -> str:
    """Which setting chose the data folder, for messages."""
    if local_dir is not None and str(local_dir).strip():
        return f"data.local_dir: {local_dir}"
    if os.environ.get(ENV, "").strip():
        return f"{ENV}={os.environ[ENV].strip()}"
    return f"data.local_dir and {ENV} unset: the default folder"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_checksums(local_dir: Path) -> dict[str, str]:
    sums = local_dir / "SHA256SUMS"
    if not sums.is_file():
        raise DataError(f"{sums} not found: the data folder holds no mirror; {HOW_TO_POINT}.")
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
        raise DataError(f"missing data file {path}: the data folder {local_dir} is incomplete.")
    if rel not in checksums:
        raise DataError(f"{path} has no entry in {local_dir / 'SHA256SUMS'}; cannot verify it.")
    digest = sha256_file(path)
    if digest != checksums[rel]:
        raise DataError(
            f"checksum mismatch for {path}: expected {checksums[rel]}, got {digest}. "
            "The local mirror is corrupt or altered; restore the file from the original mirror."
        )
    return digest


@dataclass(frozen=True)
class HubDataset:
    """One hub repository the data comes from. Its commit is not here: it is the config's
    (``data.revisions``, ``pillm.data.revisions``), so a user never edits this table."""

    repo_id: str
    repo_type: str  # "dataset" or "model"
    config: str | None
    branch: str = "main"  # the ref an unpinned source resolves to its current commit
    mb: float = 0.0  # about how much one build downloads from it (MB), for download_plan
    note: str = ""  # what a hub build gives that the offline mirror does not, if anything


# The hub sources, keyed as ``data.revisions``. PTB and Tiny Shakespeare are loading-script
# repositories on their main branch, which ``datasets`` >= 4 refuses to run; their hub-made
# parquet export (branch refs/convert/parquet) holds the same rows.
HUB_DATASETS: dict[str, HubDataset] = {
    "wikitext2": HubDataset("Salesforce/wikitext", "dataset", "wikitext-2-v1", mb=7.5),
    "ptb": HubDataset("ptb-text-only/ptb_text_only", "dataset", None, "refs/convert/parquet", 3.5),
    "tinyshakespeare": HubDataset(
        "karpathy/tiny_shakespeare", "dataset", None, "refs/convert/parquet", 1.0
    ),
    "lambada": HubDataset("EleutherAI/lambada_openai", "dataset", "default", mb=1.5),
    "sst2": HubDataset(
        "nyu-mll/glue",
        "dataset",
        "sst2",
        mb=3.5,
        note="SST-2: GLUE train comes in the hub's order (the offline mirror splits it into "
        "train.tsv + dev.tsv in another order), so the seeded SST-2 training subsets, and the "
        "LoRA numbers, differ from the offline mirror's",
    ),
    "mnist": HubDataset("ylecun/mnist", "dataset", None, mb=18.0),
    "cifar10": HubDataset(
        "uoft-cs/cifar10",
        "dataset",
        None,
        mb=144.0,
        note="CIFAR-10: the hub's original PNGs in the hub's order (the offline mirror holds "
        "lossy JPEG re-encodings sorted by label), so CIFAR-10 numbers differ from the "
        "offline mirror's",
    ),
    "gpt2_tokenizer": HubDataset("openai-community/gpt2", "model", None, mb=1.5),
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
        "gpt2_tokenizer",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "bytes",
        note="downloaded as is",
    ),
    "gpt2-tokenizer/merges.txt": MirrorFile(
        "gpt2_tokenizer",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        "bytes",
        note="downloaded as is",
    ),
}


def hub_offline() -> bool:
    """``huggingface_hub``'s own offline switch (HF_HUB_OFFLINE), not a network probe.

    The hub library reads the variable once, at import; it is read again here (the hub's own
    truthy values) so a switch set later in the process, as tests do, is seen too."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(constants.HF_HUB_OFFLINE) or env in {"1", "ON", "YES", "TRUE"}


def _offline_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    errors: list[type[BaseException]] = [
        ConnectionError,
        OfflineModeIsEnabled,
        LocalEntryNotFoundError,
    ]
    for client in ("httpx", "httpx2"):  # the hub library's HTTP client: no route to the hub
        with contextlib.suppress(ImportError, AttributeError):
            errors.append(importlib.import_module(client).TransportError)
    return tuple(errors)


def hub_call(what: str, fn, *args, hint: str = "", **kwargs):
    """``fn(*args, **kwargs)`` (a hub call); the hub library's offline errors -> DataError.
    ``hint``: what else fixes it (e.g. pinning the revision)."""
    try:
        return fn(*args, **kwargs)
    except _offline_errors() as err:
        why = "HF_HUB_OFFLINE is set" if hub_offline() else f"{type(err).__name__}: {err}"
        raise DataError(
            f"cannot load {what} from the Hugging Face hub ({why}) and it is not in the hub "
            f"cache.{' ' + hint if hint else ''} Offline, {HOW_TO_POINT}, with "
            "`data.source: auto` or `data.source: local`."
        ) from err
