"""Rule-level steps for data: write a corpus's splits, then its token arrays."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pillm.core.records import atomic_path, write_json, write_text
from pillm.data.reading import read_text
from pillm.data.revisions import Revisions
from pillm.data.sources import SPLITS, load_corpus
from pillm.data.tokenizer import build_tokenizer, encode

if TYPE_CHECKING:
    import torch


def prepare_corpus(
    name: str,
    source: str,
    local_dir: str | None,
    heldout_fraction: float,
    out_dir: str,
    revisions: Revisions = None,
) -> None:
    """Rule ``prepare_corpus``: the split texts and ``meta.json`` (policy, digests, and the hub
    revision the text came from)."""
    texts, meta = load_corpus(name, source, local_dir, heldout_fraction, revisions)
    out = Path(out_dir)
    for split in SPLITS:
        write_text(out / f"{split}.txt", texts[split])
    write_json(out / "meta.json", meta)


def tokenize_corpus(
    corpus_dir: str,
    kind: str,
    vocab_size: int,
    source: str,
    local_dir: str | None,
    out_dir: str,
    revisions: Revisions = None,
    eval_tokens: int | None = None,
) -> None:
    """Rule ``tokenize``: token arrays and ``meta.json`` (the corpus's meta, plus the tokenizer
    and, for GPT-2 BPE, the hub revision its files came from).

    ``eval_tokens`` (``data.eval_tokens``; 0 or None: whole splits) keeps the first that many
    tokens of the validation and test splits: the policy says so, the counts and bytes (for
    bits per byte, in proportion to the tokens kept) are those of the arrays written, and
    ``full_tokens`` holds the whole splits' counts."""
    corpus_dir, out = Path(corpus_dir), Path(out_dir)
    meta = json.loads((corpus_dir / "meta.json").read_text())
    texts = {s: read_text(corpus_dir / f"{s}.txt") for s in SPLITS}
    t0 = time.perf_counter()
    tok, origin = build_tokenizer(
        kind, vocab_size, texts["train"], source, local_dir, revisions, with_origin=True
    )
    if origin is not None:
        meta["revisions"] = {**meta.get("revisions", {}), "gpt2_tokenizer": origin}
    counts, full, ids_by_split = {}, {}, {}
    for split in SPLITS:
        ids = encode(tok, texts[split])
        full[split] = int(len(ids))
        if eval_tokens and split in ("valid", "test"):
            ids = ids[:eval_tokens]
        ids_by_split[split], counts[split] = ids, int(len(ids))
        with atomic_path(out / f"{split}.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, ids)
    if eval_tokens:
        meta["policy"] += f"; valid/test: first {eval_tokens} tokens"
        meta["full_tokens"] = full
        meta["bytes"] = {s: n * counts[s] / full[s] for s, n in meta["bytes"].items()}
    tok_path = out / "tokenizer.json"
    with atomic_path(tok_path) as tmp:
        tok.save(str(tmp))
    name = "GPT-2 BPE" if kind == "gpt2" else f"BPE-{tok.get_vocab_size()} (trained on train split)"
    write_json(
        out / "meta.json",
        {
            **meta,
            "tokenizer": name,
            "tokenizer_kind": kind,
            "vocab_size": tok.get_vocab_size(),
            "tokens": counts,
            "unigram_test_loss": unigram_loss(
                ids_by_split["train"], ids_by_split["test"], tok.get_vocab_size()
            ),
            "tokenize_seconds": time.perf_counter() - t0,
        },
    )


def unigram_loss(train_ids: np.ndarray, test_ids: np.ndarray, vocab_size: int) -> float:
    """Mean NLL (nats) of test tokens 1.. under add-one-smoothed train-split unigram frequencies.

    The floor of the loss-based contribution share: a model that ignores context entirely.
    """
    counts = np.bincount(train_ids.astype(np.int64), minlength=vocab_size) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[test_ids[1:].astype(np.int64)].mean())


def load_tokens(tokens_dir: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The token splits (int64 tensors) and their meta.json, for the jobs that train on them."""
    import torch  # here, not above: the corpus and tokenize jobs, which every LM and SAFFU job
    # waits for, need none of it (importing it cost them 1.2 s each on a 2-core machine)

    tokens_dir = Path(tokens_dir)
    meta = json.loads((tokens_dir / "meta.json").read_text())
    arrays = {
        s: torch.from_numpy(np.load(tokens_dir / f"{s}.npy").astype(np.int64))
        for s in ("train", "valid", "test")
    }
    return arrays, meta
