"""The SST-2 study: one job fits one method (``pillm.lora.methods``) on one frozen base model
(``pillm.lora.base``) at one seed and records it.

Every choice (λ of the closed-form heads; LoRA's learning rate and number of steps) is made on
the dev split carved from GLUE train; the 872 GLUE validation sentences only score the final
fit. Each job fits its method a second time with the same seed and records whether the
trainable weights came out bit-identical (sha256) and their largest absolute difference; the
reported time, memory and accuracy are the second (timed) fit's.

LoRA's rate search runs one job per rate of ``lora.lrs`` (``rate_job``, rule ``lora_rate``): its
early-stopped run's kept weights, metrics and curve in a tensor file, which the ``lora`` job
reads (``load_rate``) before it extends the grid past an edge pick (in its own process) and
reruns the chosen rate. The runs of a grid are independent, so they run at once: the chain of
a model's LoRA fits is one run and the rerun, not every rate in turn. A rate file is the first
fit of the determinism check, so that check spans two processes.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from pillm.core.config import ConfigError
from pillm.core.log import say
from pillm.core.records import config_hash
from pillm.core.runtime import peak_memory_mb, tf32
from pillm.core.selection import search_grid
from pillm.core.tensor_files import load_tensor_file, save_tensor_file
from pillm.data.config import DataConfig
from pillm.data.sst2 import Split
from pillm.lora.adapter import fit_adapter
from pillm.lora.base import BaseModel, load_base
from pillm.lora.config import LoraConfig
from pillm.lora.methods import (
    METHODS,
    FitResult,
    chance_loss,
    choose_lr,
    fit_closed_form,
    fit_lora,
    majority_rate,
    trained,
)

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


@dataclass
class JobFits:
    """What one job measured: the fit compared for determinism (``first``), the timed fit,
    accuracies, peak memory, the curve rows and method-specific metrics."""

    first: FitResult
    timed: FitResult
    accuracy: float  # GLUE validation (the 872): reported, never used for a choice
    dev_accuracy: float  # the dev split carved from GLUE train: every choice is made on it
    peak_mb: float
    tokenize_seconds: float
    curve: list[dict[str, float]]
    metrics: dict[str, float]


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def run_fits(
    base: BaseModel, method: str, fit: Split, dev: Split, val: Split, cfg: LoraConfig,
    seed: int, device: str, done: dict[float, FitResult] | None = None,
) -> JobFits:  # fmt: skip
    """Fit ``method`` and fit it again with the same seed; the second (timed) fit alone is
    scored on ``val`` (scoring draws no random numbers and changes no weight).

    Closed-form methods (heads, in-layer adapter): a warm-up fit, then the timed one (λ and the
    adapter's η chosen on ``dev`` inside each).
    LoRA: one early-stopped run per learning rate of ``cfg.lrs``, the grid extended past an
    edge pick by ``cfg.lr_extend`` rates per side (``pillm.core.selection.search_grid``; the selection's
    training time is ``tune_seconds``), the rate of best dev accuracy chosen, then the timed
    rerun of that rate for the chosen run's best step count, which must reproduce its weights.
    ``done``: the rates already run (``rate_job``'s files): only the others run here.
    Its record says whether it trained (``trained``, ``pillm.lora.methods.trained``: the kept
    weights' loss on the fit sentences below ``chance_loss`` and their accuracy there above the
    majority-class rate at a one-sided binomial test, p < ``cfg.trained_alpha``)."""
    if method not in METHODS:
        raise ValueError(f"unknown lora method {method!r} (lora.methods); known: {list(METHODS)}")
    say(f"{method}: tokenizing {len(fit)} fit, {len(dev)} dev, {len(val)} validation sentences")
    t0 = time.perf_counter()
    ids = {k: base.tokenize(s.sentences, cfg.max_len) for k, s in
           (("fit", fit), ("dev", dev), ("val", val))}  # fmt: skip
    tokenize_seconds = time.perf_counter() - t0
    fit_xy, dev_xy = (ids["fit"], fit.labels), (ids["dev"], dev.labels)
    if method == "lora":
        runs: dict[float, FitResult] = dict(done or {})

        def pick(grid: list[float]) -> tuple[FitResult, float, dict[float, float]]:
            for lr in grid:
                if lr not in runs:
                    say(f"lora: rate search, lr {lr:g}")
                    _reset_peak(device)
                    runs[lr] = fit_lora(base, fit_xy, dev_xy, cfg, lr, seed, device)
            best = grid[choose_lr([runs[lr] for lr in grid])]  # ties: the smaller rate
            return runs[best], best, {lr: -runs[lr].metrics["best_dev_accuracy"] for lr in grid}

        if cfg.lr_extend and len(set(cfg.lrs)) < 2:
            raise ConfigError("lora.lrs needs two distinct rates to be extended past an edge "
                              "(its ratio), or set lora.lr_extend: 0")  # fmt: skip
        first, grid = search_grid(
            cfg.lrs, cfg.lr_extend, pick, "lora.lrs", extend_key="lora.lr_extend"
        )
        steps = int(first.metrics["best_step"])
        say(f"lora: rate {grid.value:g} chosen; timed rerun of {steps} steps")
        _reset_peak(device)
        timed = fit_lora(base, fit_xy, dev_xy, cfg, grid.value, seed, device,
                         stop_at=steps)  # fmt: skip
        peak = peak_memory_mb(device)
        dev_acc = first.metrics["best_dev_accuracy"]
        best = next(c for c in first.curve if c["step"] == first.metrics["best_step"])
        curve = [{**c, "lr": lr, "chosen": float(lr == grid.value)}
                 for lr, r in runs.items() for c in r.curve]  # fmt: skip
        chance, majority = chance_loss(fit.labels), majority_rate(fit.labels)
        # the kept weights on the sentences they were fitted on (eval mode): did they learn
        assert timed.scores is not None, "fit_lora returns the logits"
        logits = timed.scores(ids["fit"])
        n_correct = int((logits.argmax(1) == fit.labels).sum())
        loss_kept = float(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(fit.labels)))
        ok, p = trained(loss_kept, chance, n_correct, len(fit), majority, cfg.trained_alpha)
        metrics = {
            **{key: first.metrics[key] for key in ("lr", "best_step", "steps_run", "warmup_steps",
                                                   "patience_from", "train_loss_first",
                                                   "train_loss_last")},
            # the running mean of the batch losses before the kept evaluation (dropout active)
            "train_loss_at_best": best["train_loss"], "chance_loss": chance,
            "train_loss_kept": loss_kept, "train_accuracy": n_correct / len(fit),
            "majority_rate": majority, "trained_p": p, "trained_alpha": cfg.trained_alpha,
            # the gradient opponent learned (paper/claims/lora.yaml: opponents)
            "trained": float(ok),
            "n_lrs": float(len(runs)),
            "lr_at_grid_edge": float(grid.edge_hit), "lr_extensions": float(grid.extensions),
            "lr_on_edge": float(grid.on_edge),
            "tune_seconds": sum(r.metrics["run_seconds"] for r in runs.values()),
            "stopped_early": float(first.metrics["steps_run"] < cfg.max_steps),
        }  # fmt: skip
    else:
        rank = cfg.pil_rank if method == "pil_lora" else 0
        fits = []
        for i in range(2):  # same seed twice: are the solved weights bit-identical?
            say(f"{method}: closed-form fit {i + 1}/2")
            _reset_peak(device)
            if method == "pil_adapter":
                fits.append(fit_adapter(base, fit_xy, dev_xy, cfg, seed, device))
            else:
                fits.append(fit_closed_form(
                    base, fit_xy, dev_xy, rank, cfg.lambdas, cfg.kappa_max, seed,
                    cfg.batch_size, device,
                ))  # fmt: skip
            peak = peak_memory_mb(device)  # before scoring: the fit's peak, not the evaluation's
        first, timed = fits
        dev_acc = accuracy(timed.predict(ids["dev"]), dev.labels)
        curve = [{"step": 0, "fit_seconds": timed.fit_seconds, "dev_accuracy": dev_acc}]
        # every selection (λ; the adapter's η) is inside the fit
        metrics = {"tune_seconds": timed.fit_seconds}
    say(f"{method}: dev accuracy {dev_acc:.4g}; scoring the validation sentences")
    acc = accuracy(timed.predict(ids["val"]), val.labels)
    return JobFits(first, timed, acc, dev_acc, peak, tokenize_seconds, curve, metrics)


@dataclass
class JobInputs:
    """What a job of the study loads: its config, SST-2 (fit, dev, validation) and base model."""

    lora: LoraConfig
    meta: dict[str, Any]
    splits: dict[str, Split]
    base: BaseModel
    seed: int
    device: str
    load_seconds: float
    params: str  # hash of the lora and data sections: a rate file must carry the same


def _job_inputs(
    model_name: str, cfg: dict[str, Any], data: dict[str, Any], checkpoint: str | None,
    tokenizer_json: str | None, device: str,
) -> JobInputs:  # fmt: skip
    """Check the lora and data sections, load SST-2 (the seed's fit/dev subsets of GLUE train
    and the validation split) and the base model, on ``device``."""
    from pillm.core.runtime import resolve_device
    from pillm.data.sst2 import load_sst2, split_train
    from pillm.lora.base import split_name

    lora, sst2 = LoraConfig.from_dict(cfg, "lora"), DataConfig.from_dict(data, "data")
    device = resolve_device(device)
    _, seed = split_name(model_name)
    if seed is None:
        raise ValueError(f"lora model {model_name!r}: expected <model>-s<seed>, e.g. minilm-s0")
    splits, meta = load_sst2(sst2.source, sst2.local_dir, sst2.revisions)
    fit, dev = split_train(splits["train"], lora.n_train, lora.n_dev, seed)
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
    split = {"fit": fit, "dev": dev, "validation": splits["validation"]}
    params = config_hash({"lora": cfg, "data": data})
    return JobInputs(lora, meta, split, base, seed, device, load_seconds, params)


RATE_KIND = "pillm.lora_rate"  # the tensor file of one rate's run (rate_job)


def rate_job(
    model_name: str, lr: float, cfg: dict[str, Any], data: dict[str, Any], device: str,
    out: str, checkpoint: str | None = None, tokenizer_json: str | None = None,
) -> None:  # fmt: skip
    """One rate of LoRA's search for one base model: the early-stopped run ``fit_lora`` makes
    in the ``lora`` job, written to ``out`` (kept weights; its metrics, curve, seconds, model,
    rate and the job parameters' hash, which ``load_rate`` checks)."""
    job_in = _job_inputs(model_name, cfg, data, checkpoint, tokenizer_json, device)
    lora, base, device = job_in.lora, job_in.base, job_in.device
    fit, dev = job_in.splits["fit"], job_in.splits["dev"]
    say(f"lora rate {lr:g}: tokenizing {len(fit)} fit and {len(dev)} dev sentences")
    fit_xy = (base.tokenize(fit.sentences, lora.max_len), fit.labels)
    dev_xy = (base.tokenize(dev.sentences, lora.max_len), dev.labels)
    with tf32(False):  # as the lora job fits
        run = fit_lora(base, fit_xy, dev_xy, lora, lr, job_in.seed, device)
    write_rate(out, model_name, lr, job_in.params, run)
    say(f"lora rate {lr:g}: best dev accuracy {run.metrics['best_dev_accuracy']:.4g}")


def write_rate(out: str, model_name: str, lr: float, params: str, run: FitResult) -> None:
    """One rate's run as ``load_rate`` reads it: kept weights (on the host), metrics, curve,
    seconds, and the model, rate and job parameters' hash it belongs to."""
    meta = {"model": model_name, "lr": lr, "params": params, "fit_seconds": run.fit_seconds,
            "metrics": run.metrics, "curve": run.curve}  # fmt: skip
    save_tensor_file(out, RATE_KIND, {k: v.detach().cpu() for k, v in run.weights.items()}, meta)


def _no_predict(ids: list[list[int]]) -> np.ndarray:
    raise RuntimeError("a rate file's run keeps its weights and records, not its model")


def load_rate(path: str, model_name: str, params: str) -> tuple[float, FitResult]:
    """(rate, its run) from ``rate_job``'s file, checked to be of ``model_name`` and of these job
    parameters (``params``: their hash); ValueError naming the file otherwise."""
    f = load_tensor_file(path, RATE_KIND)
    if f.meta.get("model") != model_name or f.meta.get("params") != params:
        raise ValueError(
            f"{path}: a LoRA rate run of {f.meta.get('model')!r} with parameters "
            f"{f.meta.get('params')!r}, not of {model_name!r} with {params!r}: rerun its rule "
            "(snakemake --forcerun lora_rate)"
        )
    run = FitResult(dict(f.tensors), _no_predict, float(f.meta["fit_seconds"]),
                    dict(f.meta["metrics"]), list(f.meta["curve"]))  # fmt: skip
    return float(f.meta["lr"]), run


def lora_job(
    model_name: str, method: str, cfg: dict[str, Any], data: dict[str, Any], device: str,
    out_dir: str, checkpoint: str | None = None, tokenizer_json: str | None = None,
    rates: list[str] | None = None,
) -> None:  # fmt: skip
    """Load SST-2 and the base model, fit ``method`` twice, write metrics.json + curve.parquet.

    ``cfg`` and ``data`` are the config's lora and data sections (dicts, checked here once);
    ``rates``: the ``rate_job`` files of LoRA's search (method ``lora``)."""
    from pathlib import Path

    from pillm.core.records import (
        IDENTITY,
        provenance,
        tidy_records,
        write_json,
        write_rows_parquet,
    )

    job_in = _job_inputs(model_name, cfg, data, checkpoint, tokenizer_json, device)
    lora, base, seed, device = job_in.lora, job_in.base, job_in.seed, job_in.device
    fit, dev, val = (job_in.splits[k] for k in ("fit", "dev", "validation"))
    done = dict(load_rate(r, model_name, job_in.params) for r in rates or [])
    if done:
        say(f"lora: the runs of rates {', '.join(f'{lr:g}' for lr in done)} read from their jobs")
    with tf32(False):  # float32 features into float64 Grams: no TF32 rounding
        job = run_fits(base, method, fit, dev, val, lora, seed, device, done)
    first, timed = job.first, job.timed
    digests = [weights_digest(f.weights) for f in (first, timed)]
    metrics = {
        "accuracy": job.accuracy, "dev_accuracy": job.dev_accuracy,
        "fit_seconds": timed.fit_seconds, "fit_seconds_first": first.fit_seconds,
        "peak_memory_mb": job.peak_mb,
        "trainable_params": sum(w.numel() for w in timed.weights.values()),
        "identical_rerun": float(digests[0] == digests[1]),
        "max_abs_diff": max_abs_diff(first.weights, timed.weights),
        "n_train": len(fit), "n_dev": len(dev), "n_eval": len(val),
        "max_len": lora.max_len, "tokenize_seconds": job.tokenize_seconds,
        "load_seconds": job_in.load_seconds, "d_model": base.d_model,
        **{k: v for k, v in timed.metrics.items() if method != "lora"}, **job.metrics,
    }  # fmt: skip
    run_identity = {
        "experiment": "lora", "variant": method, "seed": seed, "corpus": "sst2",
        "tokenizer": base.label, "data_policy": job_in.meta["policy"],
    }  # fmt: skip
    assert set(run_identity) == set(IDENTITY)
    ident = {"model": base.name, "model_group": base.group, "model_label": base.label,
             "method": method}  # fmt: skip
    context_cols = {**provenance(device, job_in.meta), **ident, "weights_sha256": digests[1]}
    out = Path(out_dir)
    write_rows_parquet(out / "curve.parquet", job.curve, {**ident, "seed": seed})
    write_json(out / "metrics.json", tidy_records(run_identity, metrics, context_cols))
