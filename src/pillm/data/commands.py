"""The data layer's commands: the mirror, corpus splits, token arrays, decoded images."""

import argparse
from collections.abc import Callable
from typing import Any

from pillm.core.commands import OUT_DIR, Arg, Command, js, req, section


def optional(key: str, sub: str | None = None) -> Callable[[argparse.Namespace], Any]:
    """``--params``'s ``key`` (or its ``sub``) entry, None when absent: a data section without
    ``local_dir`` or ``revisions`` means the default folder and the committed pins."""

    def get(ns: argparse.Namespace) -> Any:
        node = ns.params if sub is None else ns.params.get(key, {})
        return node.get(key if sub is None else sub)

    get.__name__ = f"params[{key}]" + ("" if sub is None else f"[{sub}]") + "?"
    return get


COMMANDS: tuple[Command, ...] = (
    Command(
        "prepare-corpus", "pillm.data.corpus:prepare_corpus",
        "load a corpus (hub or local mirror) into split texts",
        (req("--corpus"), js(help="the config's data section (JSON)"), OUT_DIR),
        ("corpus", section("source"), optional("local_dir"), section("heldout_fraction"),
         "out_dir", optional("revisions")),
        user_errors=("pillm.data.files:DataError",),
    ),
    Command(
        "mirror", "pillm.data.sources:mirror_job",
        "check the data mirror (data.source auto: build it from the hub when absent)",
        (js(help="the config's data section (JSON)"), req("--out")),
        (section("source"), optional("local_dir"), "out", optional("revisions")),
        user_errors=("pillm.data.files:DataError",),
    ),
    Command(
        "tokenize", "pillm.data.corpus:tokenize_corpus",
        "tokenize split texts into .npy arrays",
        (req("--corpus-dir"), js(help="{tokenizer: ..., data: ...} (JSON)"), OUT_DIR),
        ("corpus_dir", section("tokenizer", "kind"), section("tokenizer", "vocab_size"),
         section("data", "source"), optional("data", "local_dir"), "out_dir",
         optional("data", "revisions"), optional("data", "eval_tokens")),
        user_errors=("pillm.data.files:DataError",),
    ),
    Command(
        "gen-images", "pillm.data.image_files:prepare_images",
        "decode an image dataset's splits into one uint8 .npz",
        # its own --threads (decoding processes): the shared flag sets torch's threads, and
        # importing torch for it would delay every generative job, which waits for this one
        (req("--dataset"), js("--data", "the config's data section"), req("--out"),
         Arg("--threads", {"type": int, "default": 0, "help": "decoding processes (0: one)"})),
        ("dataset", "data", "out", "threads"),
        user_errors=("pillm.data.files:DataError",),
    ),
)  # fmt: skip
