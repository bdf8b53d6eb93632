"""AdamW training of the SAFFU model (pillm.saffu.model) from a start, and the choice of its rate.

Each start is trained by AdamW at every rate of ``lrs`` (extended past an edge pick), each run
stopped when the held-out loss has not set a new minimum for ``patience`` evaluations (at most
``max_steps``) and rolled back to its minimum; the rate with the lowest held-out loss wins.
Early stopping may watch a strided subset of the held-out rows (``early_stop_rows``); the rates
are then compared on all of them. The step is pillm.saffu.optim's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pillm.core.log import Progress
from pillm.core.runtime import lr_at, sync
from pillm.core.selection import GridPick, check_extendable, search_grid
from pillm.saffu.config import SaffuJobConfig
from pillm.saffu.model import SaffuLM, heldout_loss
from pillm.saffu.optim import adamw_for


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
    progress = Progress(label, job.max_steps)
    for step in range(1, job.max_steps + 1):
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
            # at an evaluation only: both losses are on the host there
            progress.update(step, train_loss=row["train_loss"], val_loss=val)
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

    check_extendable(job.lrs, job.lr_extend, "saffu.lrs", "saffu.lr_extend")
    fit, chosen = search_grid(
        job.lrs, job.lr_extend, pick, "saffu.lrs", extend_key="saffu.lr_extend"
    )
    assert fit.weight is not None
    model.weight.data.copy_(fit.weight)
    curves = [row for f in runs.values() for row in f.curve]
    return fit, chosen, sum(f.seconds for f in runs.values()), curves
