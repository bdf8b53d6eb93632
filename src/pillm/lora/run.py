"""PIL-LoRA vs LoRA on SST-2: one job fits one method (``pillm.lora.methods``) on one frozen
base model (``pillm.lora.base``) and records it.

Each job fits its method twice with the same seed and records whether the trainable weights
came out bit-identical (sha256) and their largest absolute difference. The first fit is the
warm-up; the reported time, memory and accuracy are the second fit's (only it is scored).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pillm.core.runtime import peak_memory_mb
from pillm.data.sst2 import Split
from pillm.lora.base import BaseModel, load_base
from pillm.lora.methods import METHODS, FitResult, fit_closed_form, fit_lora
from pillm.settings import DataConfig, LoraConfig

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
