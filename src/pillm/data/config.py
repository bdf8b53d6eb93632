"""The ``data`` section as a job reads it."""

from __future__ import annotations

from dataclasses import dataclass

from pillm.core.config import Section


@dataclass(frozen=True)
class RevisionsConfig(Section):
    """The hub commit each data source is read at (``data.revisions``; docs/data.md).

    A 40-hex commit, or None: resolved to the current commit of its branch when first built and
    recorded (MIRROR.json, the corpus and token meta.json). The defaults are the committed pins
    (config/schema.yaml holds the same values)."""

    wikitext2: str | None = "b08601e04326c79dfdd32d625aee71d232d685c3"
    ptb: str | None = None
    tinyshakespeare: str | None = None
    lambada: str | None = "900124bf3b8235c6daf21033af9948b3f07346c4"
    sst2: str | None = "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c"
    mnist: str | None = "77f3279092a1c1579b2250db8eafed0ad422088c"
    cifar10: str | None = "0b2714987fa478483af9968de7c934580d0bb9a2"
    gpt2_tokenizer: str | None = "607a30d783dfa663caf39e06633721c8d4cfcd7e"


@dataclass(frozen=True)
class DataConfig(Section):
    corpus: str
    heldout_fraction: float
    source: str = "auto"  # "auto" (the folder's mirror, else built from the hub), "local", "hub"
    local_dir: str | None = ""  # the data folder; "" or None: $PILLM_DATA, else ~/.cache/pillm/data
    revisions: RevisionsConfig | None = None  # None: the committed pins (RevisionsConfig)
    eval_tokens: int = 0  # 0: the validation and test token splits whole; else their first tokens
