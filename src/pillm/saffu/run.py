"""SAFFU jobs: both starts of the explicit-solution LM (pillm.saffu.model) trained by AdamW
and scored, one setting at one train fraction.

Training (issue #16: a cold start that is no strawman). Warm start: the smoothed explicit
solution W of pillm.saffu.model. Cold start: every row ``log u`` (the unigram model: with
||x||_1 = 1 a constant row is an output bias) plus N(0, init_std^2). Each start is trained by AdamW at every rate of ``lrs`` (extended past an
edge pick), each run stopped when the held-out loss has not set a new minimum for ``patience``
evaluations (at most ``max_steps``) and rolled back to its minimum; the rate with the lowest
held-out loss wins. Early stopping may watch a strided subset of the held-out rows
(``early_stop_rows``); the rates are then compared on all of them. The first seed of a job
picks the rate of each start; later seeds reuse it.
One job is one setting at one train fraction (pillm.saffu.data: a seeded window of the train
split, shared by both starts of a seed). Perplexity is the LM table's: exp of the mean
next-token NLL over every test token after the first (here each with up to
``max(block, radius)`` tokens of context, across window boundaries).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from pillm.core.config import ConfigError
from pillm.core.records import (
    config_hash,
    provenance,
    tidy_records,
    write_json,
    write_rows_parquet,
)
from pillm.core.runtime import lr_at, peak_memory_mb, process_seconds, resolve_device, sync
from pillm.core.selection import GridPick, search_grid
from pillm.data.corpus import load_tokens
from pillm.models.evaluate import bits_per_byte, perplexity
from pillm.saffu.config import SaffuJobConfig, SaffuSetting
from pillm.saffu.data import fraction_tag, train_window
from pillm.saffu.model import (
    SaffuLM,
    cold_start,
    context_features,
    cooccurrence,
    evaluate,
    explicit_solution,
    heldout_loss,
    n_inputs,
    type_index,
    unigram,
)
from pillm.saffu.optim import adamw_for

INITS = ("explicit", "random")


# ---------------------------------------------------------------- training


@dataclass
class Fit:
    """One AdamW run from a start: its best held-out loss, where it was, the weights there."""

    lr: float
    best_val: float
    best_step: int
    steps: int  # steps taken (patience stop or the cap)
    cap_stop: bool  # ended by max_steps before patience ran out (its budget, not its curve)
    hit_cap: bool  # ... with the minimum at the last measurement: still improving
    seconds: float
    curve: list[dict[str, Any]]
    weight: Tensor | None  # the best weights (None once another lr won)


def train_adamw(
    model: SaffuLM, start: Tensor, train: tuple, valid: tuple, lr: float, seed: int,
    job: SaffuJobConfig, label: str,
) -> Fit:  # fmt: skip
    """AdamW from ``start`` at rate ``lr`` (linear warm-up, then constant) until the held-out
    loss, measured every ``eval_every`` steps, has not improved for ``patience`` measurements
    or ``max_steps`` steps are taken; returns the best point (the model is left there). The
    step is pillm.saffu.optim's (on CUDA the weight gradient is summed inside the update)."""
    device = start.device
    model.weight.data.copy_(start)
    opt = adamw_for(model, tuple(job.betas), job.weight_decay)
    tr_idx, tr_wts, tr_y = train
    watched = early_stop_rows(valid, job.early_stop_rows)
    n_train = tr_idx.shape[0]
    bs = min(job.batch_size, n_train)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    order, pos = torch.randperm(n_train, generator=gen).to(device), 0
    best_val = heldout_loss(model, *watched, job.eval_chunk)
    best_step, best_w, bad = 0, model.weight.detach().clone(), 0
    curve = [{"step": 0, "tokens": 0, "train_loss": None, "val_loss": best_val, "lr": lr}]
    sync(str(device))
    t0 = time.perf_counter()
    step, cap_stop = 0, False
    for step in tqdm(range(1, job.max_steps + 1), desc=label, mininterval=5):
        if pos + bs > n_train:
            order, pos = torch.randperm(n_train, generator=gen).to(device), 0
        b = order[pos : pos + bs]
        pos += bs
        rate = lr_at(step - 1, job.max_steps, lr, job.warmup_steps, 1.0)
        loss = opt.step(tr_idx[b], tr_wts[b], tr_y[b], rate)
        row = {"step": step, "tokens": step * bs, "train_loss": None, "val_loss": None, "lr": lr}
        if step % job.eval_every == 0 or step == job.max_steps:
            row["train_loss"] = loss.item()
            row["val_loss"] = val = heldout_loss(model, *watched, job.eval_chunk)
            if val < best_val:
                best_val, best_step, bad = val, step, 0
                best_w.copy_(model.weight.detach())
            else:
                bad += 1
            curve.append(row)
            if not math.isfinite(val) or bad >= job.patience:
                break
    else:  # neither patience nor a diverged loss ended the run: the cap did
        cap_stop = True
    sync(str(device))
    seconds = time.perf_counter() - t0
    model.weight.data.copy_(best_w)
    if watched is not valid:  # rates are compared on every held-out row, at each run's best
        best_val = heldout_loss(model, *valid, job.eval_chunk)
    hit_cap = cap_stop and best_step == step
    return Fit(lr, best_val, best_step, step, cap_stop, hit_cap, seconds, curve, best_w)


def early_stop_rows(valid: tuple, rows: int) -> tuple:
    """About ``rows`` held-out rows, every k-th (so they span the split), that early stopping
    watches; all of them when ``rows`` is 0 or not smaller. At the paper scale a full held-out
    pass reads about ten times the rows of the ``eval_every`` training steps between passes."""
    n = valid[0].shape[0]
    if rows <= 0 or rows >= n:
        return valid
    stride = -(-n // rows)
    return tuple(t[::stride] for t in valid)


def tune_lr(
    model: SaffuLM, start: Tensor, data: dict, seed: int, job: SaffuJobConfig, label: str
) -> tuple[Fit, GridPick, float, list[dict[str, Any]]]:
    """The rate of ``job.lrs`` (extended past an edge, ``lr_extend`` points per side) whose run
    reaches the lowest held-out loss; returns that run, the selection, the seconds of all runs
    and all their curves (each row carries its ``lr``)."""
    runs: dict[float, Fit] = {}

    def pick(grid: list[float]) -> tuple[Fit, float, dict[float, float]]:
        for lr in grid:
            if lr not in runs:
                runs[lr] = train_adamw(model, start, data["train"], data["valid"], lr, seed, job,
                                       f"{label} lr={lr:g}")  # fmt: skip
                # Keep only weights that can still win (a grid only grows, so a run beaten now
                # stays beaten). At the paper scale the jobs that searched peaked 1.6 GB above
                # those that reuse a rate (10.4 against 8.8 GB): two weight copies' worth.
                low = min(f.best_val for f in runs.values())
                for fit in runs.values():
                    if fit.best_val > low:
                        fit.weight = None
        scores = {lr: runs[lr].best_val for lr in grid}
        best = min(grid, key=lambda lr: scores[lr])
        for lr, fit in runs.items():  # keep one copy of weights: the winner's
            if lr != best:
                fit.weight = None
        return runs[best], best, scores

    check_grid(job.lrs, job.lr_extend, "saffu.lrs", "saffu.lr_extend")
    fit, chosen = search_grid(
        job.lrs, job.lr_extend, pick, "saffu.lrs", extend_key="saffu.lr_extend"
    )
    assert fit.weight is not None
    model.weight.data.copy_(fit.weight)
    curves = [row for f in runs.values() for row in f.curve]
    return fit, chosen, sum(f.seconds for f in runs.values()), curves


def check_grid(grid: Sequence[float], extend: int, key: str, extend_key: str) -> None:
    """A grid extended past its edge needs two distinct positive values (its ratio)."""
    if extend and len({x for x in grid if x > 0}) < 2:
        raise ConfigError(
            f"{key} = {list(grid)}: extending it past an edge needs two distinct positive values "
            f"(their ratio is the step); add one, or set {extend_key}: 0"
        )


def select_alpha(
    f: Tensor, prior: Tensor, job: SaffuJobConfig, model: SaffuLM, valid: tuple
) -> tuple[Tensor, GridPick, dict[float, float]]:
    """Smoothing mass of ``job.alphas`` (extended past an edge, ``alpha_extend`` points per side)
    with the lowest held-out loss; returns the explicit solution there and the selection."""
    scores: dict[float, float] = {}

    def pick(grid: list[float]) -> tuple[None, float, dict[float, float]]:
        for a in grid:
            if a not in scores:
                model.weight.data.copy_(explicit_solution(f, a, prior))
                scores[a] = heldout_loss(model, *valid, job.eval_chunk)
        best = min(grid, key=lambda a: scores[a])
        return None, best, {a: scores[a] for a in grid}

    check_grid(job.alphas, job.alpha_extend, "saffu.alphas", "saffu.alpha_extend")
    _, chosen = search_grid(
        job.alphas, job.alpha_extend, pick, "saffu.alphas", extend_key="saffu.alpha_extend"
    )
    return explicit_solution(f, chosen.value, prior), chosen, scores


def grid_metrics(name: str, g: GridPick) -> dict[str, float]:
    """A selection as metrics: the value, whether the configured grid's pick was on an edge,
    how many points were added, and whether the final pick is still on an edge."""
    return {name: g.value, f"{name}_edge_hit": float(g.edge_hit),
            f"{name}_extensions": float(g.extensions), f"{name}_on_edge": float(g.on_edge)}  # fmt: skip


# ---------------------------------------------------------------- one job


@dataclass
class Window:
    """One train window's inputs: type map, features of every split, the unigram, the warm
    start (explicit solution at the chosen alpha) and its selection."""

    offset: int
    length: int
    m: int
    n_in: int
    other_share: float
    data: dict[str, tuple[Tensor, Tensor, Tensor]]
    prior: Tensor
    warm: Tensor | None
    explicit: dict[str, float]  # the warm start's solve, selection and test metrics
    common: dict[str, float]  # every run's: the unigram model's test metrics


def prepare_window(
    arrays: dict[str, Tensor], offset: int, length: int, vocab: int, setting: SaffuSetting,
    job: SaffuJobConfig, model: SaffuLM | None, device: str, explicit: bool, test_bytes: int,
) -> tuple[Window, SaffuLM]:  # fmt: skip
    train = arrays["train"][offset : offset + length]
    index, m = type_index(train, vocab, job.top_types)
    n_in = n_inputs(setting.agg, m)
    if model is None or model.weight.shape[0] != n_in:
        model = SaffuLM(n_in, vocab).to(device)
    data = {}
    for split, toks in (("train", train), ("valid", arrays["valid"]), ("test", arrays["test"])):
        toks = toks.to(device)
        idx, wts = context_features(toks, index, m, setting.block, setting.radius, setting.agg)
        data[split] = (idx, wts, toks[1:])
    prior = unigram(data["train"][2], vocab)
    out: dict[str, float] = {}
    warm = None
    if explicit:
        sync(device)
        t0 = time.perf_counter()
        f = cooccurrence(*data["train"], n_in, vocab)
        sync(device)
        out["cooccurrence_time_s"] = time.perf_counter() - t0
        warm, alpha, scores = select_alpha(f, prior, job, model, data["valid"])
        del f
        sync(device)
        out["solve_time_s"] = time.perf_counter() - t0
        out.update(grid_metrics("alpha", alpha), alpha_val_loss=scores[alpha.value])
        model.weight.data.copy_(warm)  # the explicit solution as a model of its own
        out.update(score_test(model, data["test"], job.eval_chunk, test_bytes, prefix="init_"))
    # the cold start's model before its first step, without its noise: the train unigram
    unigram_loss = float(-prior.log()[data["test"][2]].mean())
    common = {"unigram_test_loss": unigram_loss, "unigram_test_ppl": perplexity(unigram_loss)}
    other = float((index[train] == m - 1).double().mean())
    return Window(offset, length, m, n_in, other, data, prior, warm, out, common), model


def score_test(
    model: SaffuLM, test: tuple, chunk: int, test_bytes: int, prefix: str = ""
) -> dict[str, float]:
    """Test loss, perplexity, accuracy and bits per byte of the model as it stands."""
    r = evaluate(model, *test, chunk)
    n_tok = int(test[2].shape[0]) + 1
    return {
        f"{prefix}test_loss": r["loss"],
        f"{prefix}test_ppl": perplexity(r["loss"]),
        f"{prefix}test_acc": r["acc"],
        f"{prefix}test_bpb": bits_per_byte(r["nll"], int(r["n"]), n_tok, test_bytes),
    }


def reused_rates(
    path: str | Path, inits: Sequence[str]
) -> tuple[dict[str, tuple[float, GridPick]], str]:
    """Each start's chosen rate and its selection, as another job recorded them (its first
    seed's run), and that job's setting; ValueError naming the file when a start is missing."""
    import json

    rows = json.loads(Path(path).read_text())
    out = {}
    for init in inits:
        mine = [r for r in rows if r["init"] == init and r["metric"].startswith("lr")]
        if not mine:
            raise ValueError(f"{path}: no chosen rate of the {init!r} start to reuse")
        first = min(r["seed"] for r in mine)
        m = {r["metric"]: r["value"] for r in mine if r["seed"] == first}
        pick = GridPick(m["lr"], (), bool(m["lr_edge_hit"]), int(m["lr_extensions"]),
                        bool(m["lr_on_edge"]))  # fmt: skip
        out[init] = (m["lr"], pick)
    return out, rows[0]["variant"]


def run_saffu(
    setting_name: str,
    fraction: float,
    cfg: dict[str, Any],
    tokens_dir: str | Path,
    out_dir: str | Path,
    device: str = "auto",
    rates_from: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Every seed and init of one SAFFU setting at one train fraction: the explicit solution
    (warm start) and the log-unigram start (cold), each trained by AdamW at a rate chosen on
    held-out data (at the first seed; later seeds reuse it) until the held-out loss stops
    improving. With ``rates_from`` (another job's ``metrics.json``: a later seed takes its
    first seed's choice, the ablation settings the main setting's full-split one) each start
    reuses that job's rate and searches none; ``lr_reused`` records a rate taken from another
    setting. Writes ``metrics.json`` (tidy records, one run per seed x init) and
    ``curve.parquet``. The records of a seed are the same whether its job ran the seeds before
    it or took their rate from ``rates_from`` (the pipeline runs one seed a job).

    ``cfg`` is pillm.saffu.plan.saffu_job_params's dict (checked here once into SaffuJobConfig)."""
    job = SaffuJobConfig.from_dict(cfg, "saffu")
    setting = job.setting(setting_name)
    for init in job.inits:
        if init not in INITS:
            raise ConfigError(f"saffu.inits: {init!r} is not one of {INITS}")
    device = resolve_device(device)
    startup = process_seconds()  # interpreter and imports, before any work
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    arrays, meta = load_tokens(tokens_dir)
    vocab, n_train = meta["vocab_size"], len(arrays["train"])
    test_bytes = meta["bytes"]["test"]
    tag = fraction_tag(fraction)
    records: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    chosen: dict[str, tuple[float, GridPick]] = {}  # init -> (rate, selection)
    from_other_setting = False
    if rates_from:
        chosen, source = reused_rates(rates_from, job.inits)
        from_other_setting = source != setting_name
    win: Window | None = None
    model: SaffuLM | None = None
    context = {
        **provenance(device), "agg": setting.agg, "block": setting.block,
        "radius": setting.radius, "top_types": job.top_types, "vocab_size": vocab,
        "config_hash": config_hash({k: v for k, v in cfg.items() if k != "settings"}
                                   | {"setting": cfg["settings"][setting_name]}),
    }  # fmt: skip
    for seed in job.seeds:
        offset, length = train_window(n_train, fraction, seed)
        if win is None or (win.offset, win.length) != (offset, length):
            win = None  # free the previous window's tensors first
            win, model = prepare_window(arrays, offset, length, vocab, setting, job, model,
                                        device, "explicit" in job.inits, test_bytes)  # fmt: skip
        assert model is not None
        for init in job.inits:
            torch.manual_seed(seed)
            out: dict[str, float] = {"fraction": fraction, "train_tokens": float(length),
                                     "window_offset": float(offset), **win.common}  # fmt: skip
            start = win.warm if init == "explicit" else cold_start(win.prior, win.n_in,
                                                                  job.init_std, seed)  # fmt: skip
            assert start is not None
            if init == "explicit":
                out.update(win.explicit)
            else:
                out["solve_time_s"] = 0.0
            model.weight.data.copy_(start)
            out["init_val_loss"] = heldout_loss(model, *win.data["valid"], job.eval_chunk)
            label = f"saffu {setting_name}/{tag}/{init}/s{seed}"
            if init not in chosen:
                fit, lr_pick, tune_s, curve = tune_lr(model, start, win.data, seed, job, label)
                chosen[init] = (lr_pick.value, lr_pick)
                out["lr_tuned_here"], out["tune_time_s"] = 1.0, tune_s
            else:
                fit = train_adamw(model, start, win.data["train"], win.data["valid"],
                                  chosen[init][0], seed, job, label)  # fmt: skip
                out["lr_tuned_here"], out["tune_time_s"], curve = 0.0, 0.0, fit.curve
            del start
            out.update(grid_metrics("lr", chosen[init][1]), lr_reused=float(from_other_setting))
            out.update(score_test(model, win.data["test"], job.eval_chunk, test_bytes))
            out.update(
                val_loss=fit.best_val, val_ppl=perplexity(fit.best_val),
                best_step=float(fit.best_step), train_steps=float(fit.steps),
                stopped_at_step_cap=float(fit.cap_stop), hit_step_cap=float(fit.hit_cap),
                train_time_s=fit.seconds,
                tokens_per_s=fit.steps * job.batch_size / fit.seconds if fit.seconds > 0 else math.nan,
                params=float(win.n_in * vocab), n_inputs=float(win.n_in),
                other_share=win.other_share, test_predicted=float(win.data["test"][2].shape[0]),
            )  # fmt: skip
            identity = {
                "experiment": "saffu", "variant": setting_name, "init": init, "fraction": fraction,
                "seed": seed, "corpus": meta["corpus"], "tokenizer": meta["tokenizer"],
                "data_policy": meta["policy"],
            }  # fmt: skip
            records += tidy_records(identity, out, context)
            curves += [{**row, "variant": setting_name, "init": init, "fraction": fraction,
                        "seed": seed, "agg": setting.agg, "block": setting.block,
                        "radius": setting.radius} for row in curve]  # fmt: skip
    # job_time_s: the whole process so far, start-up included (as the LM and generative jobs)
    job_metrics = {"job_time_s": process_seconds(), "startup_time_s": startup,
                   "peak_memory_mb": peak_memory_mb(device)}  # fmt: skip
    runs = {(r["seed"], r["init"]): r for r in records}  # one identity per run
    for r in runs.values():
        base = {k: v for k, v in r.items() if k not in ("metric", "value")}
        records += [{**base, "metric": k, "value": float(v)} for k, v in job_metrics.items()]
    out_dir = Path(out_dir)
    write_rows_parquet(out_dir / "curve.parquet", curves, {})
    write_json(out_dir / "metrics.json", records)
    return records
