"""Tokenizers and token arrays.

Two tokenizers: GPT-2 byte-level BPE (local ``vocab.json``/``merges.txt`` or the hub id
``gpt2``), or a byte-level BPE trained with ``tokenizers`` on the train split only (a small vocab
keeps the CPU smoke run fast: the output softmax dominates a tiny model's cost). Token arrays
are saved as ``.npy`` (uint16 when the vocab fits) with a ``meta.json`` of counts and bytes so
bits-per-byte can be computed later without the text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from pillm.data.revisions import Revisions

EOT = "<|endoftext|>"
FILES = ("vocab.json", "merges.txt")  # GPT-2 BPE, in the mirror and on the hub


def gpt2_tokenizer(
    source: str, local_dir: str | None, revisions: Revisions = None, with_origin: bool = False
):
    """GPT-2 BPE from the local mirror (``<data folder>/gpt2-tokenizer``) or from the hub.

    Both read the same two files (``vocab.json``, ``merges.txt``); the hub's are downloaded at
    ``data.revisions.gpt2_tokenizer``. ``with_origin``: ``(tokenizer, provenance)``, the
    provenance as ``pillm.data.revisions`` records it."""
    from pillm.data.files import hub_call, read_checksums, verify_file
    from pillm.data.revisions import hub_source, local_record
    from pillm.data.sources import resolve_source

    source, local_dir = resolve_source(source, local_dir, revisions)
    if source == "local":
        root = Path(local_dir)
        sums = read_checksums(root)
        for name in FILES:
            verify_file(root, f"gpt2-tokenizer/{name}", sums)
        d = root / "gpt2-tokenizer"
        paths = [d / name for name in FILES]
        origin = local_record(root, "gpt2_tokenizer")
    else:
        from huggingface_hub import hf_hub_download

        hub = hub_source("gpt2_tokenizer", revisions)
        paths = [
            hub_call(
                f"{hub.repo_id}/{name}",
                hf_hub_download,
                hub.repo_id,
                name,
                repo_type=hub.repo_type,
                revision=hub.revision,
            )
            for name in FILES
        ]
        origin = hub.record()
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE.from_file(str(paths[0]), str(paths[1])))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return (tok, origin) if with_origin else tok


def train_bpe(train_text: str, vocab_size: int) -> Tokenizer:
    """Byte-level BPE trained on the train split only (never sees valid/test)."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_text.splitlines(keepends=True), trainer=trainer)
    return tok


def build_tokenizer(
    kind: str,
    vocab_size: int,
    train_text: str,
    source: str,
    local_dir: str | None,
    revisions: Revisions = None,
    with_origin: bool = False,
):
    """The tokenizer; ``with_origin``: ``(tokenizer, hub provenance or None)`` (a BPE trained
    here comes from no hub file)."""
    if kind == "gpt2":
        return gpt2_tokenizer(source, local_dir, revisions, with_origin)
    if kind == "bpe":
        tok = train_bpe(train_text, vocab_size)
        return (tok, None) if with_origin else tok
    raise ValueError(f"tokenizer.kind must be 'gpt2' or 'bpe', got {kind!r}")


def encode(tok: Tokenizer, text: str) -> np.ndarray:
    """Encode line by line (bounded memory, parallel in ``tokenizers``) and concatenate."""
    lines = text.splitlines(keepends=True)
    ids = [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(lines)]
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    dtype = np.uint16 if tok.get_vocab_size() <= np.iinfo(np.uint16).max + 1 else np.int32
    return flat.astype(dtype)


def decode(tok: Tokenizer, ids) -> str:
    return tok.decode([int(i) for i in ids], skip_special_tokens=False)
