"""SAFFU jobs: both starts of the explicit-solution LM (pillm.saffu.model) trained by AdamW
and scored, one setting at one train fraction.

Starts (issue #16: a cold start that is no strawman). Warm: the smoothed explicit solution W of
pillm.saffu.model (pillm.saffu.window). Cold: every row ``log u`` (the unigram model: with
||x||_1 = 1 a constant row is an output bias) plus N(0, init_std^2). Each is trained by AdamW at
the rate of ``lrs`` with the lowest held-out loss (pillm.saffu.train). The first seed of a job
picks the rate of each start; later seeds reuse it.
One job is one setting at one train fraction (pillm.saffu.data: a seeded window of the train
split, shared by both starts of a seed). Perplexity is the LM table's: exp of the mean
next-token NLL over every test token after the first (here each with up to
``max(block, radius)`` tokens of context, across window boundaries).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from pillm.core.config import ConfigError
from pillm.core.log import process_seconds, say
from pillm.core.records import (
    config_hash,
    provenance,
    tidy_records,
    write_json,
    write_rows_parquet,
)
from pillm.core.runtime import peak_memory_mb, resolve_device
from pillm.core.selection import GridPick
from pillm.data.corpus import load_tokens
from pillm.models.evaluate import perplexity
from pillm.saffu.config import SaffuJobConfig
from pillm.saffu.data import fraction_tag, train_window
from pillm.saffu.grids import grid_metrics, reused_rates
from pillm.saffu.model import SaffuLM, cold_start, heldout_loss
from pillm.saffu.train import train_adamw, tune_lr
from pillm.saffu.window import Window, prepare_window, score_test

INITS = ("explicit", "random")


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
        **provenance(device, meta), "agg": setting.agg, "block": setting.block,
        "radius": setting.radius, "top_types": job.top_types, "vocab_size": vocab,
        "config_hash": config_hash({k: v for k, v in cfg.items() if k != "settings"}
                                   | {"setting": cfg["settings"][setting_name]}),
    }  # fmt: skip
    for seed in job.seeds:
        offset, length = train_window(n_train, fraction, seed)
        if win is None or (win.offset, win.length) != (offset, length):
            win = None  # free the previous window's tensors first
            say(f"saffu {setting_name}/{tag}: window of {length} train tokens, explicit solution")
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
            say(f"{label}: AdamW from held-out loss {out['init_val_loss']:.4g}")
            if init not in chosen:
                fit, lr_pick, tune_s, curve = tune_lr(model, start, win.data, seed, job, label)
                chosen[init] = (lr_pick.value, lr_pick)
                out["lr_tuned_here"], out["tune_time_s"] = 1.0, tune_s
            else:
                lr = chosen[init][0]
                fit = train_adamw(model, start, win.data["train"], win.data["valid"], lr, seed,
                                  job, f"{label} lr={lr:g}")  # fmt: skip
                out["lr_tuned_here"], out["tune_time_s"], curve = 0.0, 0.0, fit.curve
            del start
            out.update(grid_metrics("lr", chosen[init][1]), lr_reused=float(from_other_setting))
            say(f"{label}: best held-out loss {fit.best_val:.4g} at step {fit.best_step}; test")
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
