"""The closed form's direct gradient opponent: AdamW on the output layer alone, over the PIL fit's
own frozen random features and its own training pairs (method ``adamw_out``).

A PIL fit streams N pairs (x_t, t, target) once into its Gram statistics and solves W_out. This
arm draws the same random layer from the same seed and the same N pairs from the same noise
streams (flow: stream 0; diffusion: stream 10 + 2b in bucket b), caches their features H
(float32, TF32 off, as the solve computes them) and targets on the device, and trains W_out from
zero (the PIL net's start) by AdamW on the mean squared error, in passes over those N pairs: it
sees the closed form's training pairs and no others. A pass is one shuffled sweep in batches of
``batch_size`` rows per output map (bucketed diffusion: that many rows of every bucket at once,
each row through its own bucket's map: the maps are independent least-squares problems, so each
gets the batch an unbucketed map gets, and each step's update of every bucket's map, the step's
main cost, serves a full batch per map).
After each pass the held-out error is evaluated with
the clock stopped. Schedule: linear warm-up, then cosine decay to a tenth over ``max_epochs``
passes (the cap's length), as the full-network arm's over its steps. At the first evaluation
where the curve has flattened (convergence.flattened) once the run has trained
(convergence.trained: a small rate's slow start is not a flat end) the run anneals: over
``anneal_epochs`` more passes its rate falls from where the schedule stands by cosine to the
schedule's floor (a tenth of the peak), then it stops; with ``anneal_epochs`` 0 it stops there.
Why: a constant-ish rate leaves AdamW at a noise floor that grows with the rate, so the flat
rule fired with the rate still near its peak (at 0.6-0.7 of it on the paper config's flow
arms), and a larger rate, flat sooner at a higher floor, never had its rate lowered: the pick
fell on the grid's smallest rate. ``max_epochs`` caps the passes, annealing included. The run
keeps the weights of the lowest held-out error.

Learning rate, chosen on the first seed as the full-network arm's is: there each rate of
``lr_grid`` trains so; the lowest held-out error at its kept pass wins, and a pick on an edge of
the grid extends it by up to ``lr_extend`` rates per side (pillm.core.selection.search_grid).
The later seeds train that rate alone (``lr``, read from the first seed's record). The held-out
error is the one every fit is scored on (``evaluate``), on the held-out images the PIL fit picks
λ on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from pillm.core.adamw import AdamW
from pillm.core.log import Progress, say
from pillm.core.ridge import chunk_ranges
from pillm.core.runtime import lr_at, peak_memory_mb, sync, tf32
from pillm.core.selection import search_grid
from pillm.generative.convergence import MIN_LR_FRAC, flattened, rel_gain, trained
from pillm.generative.diffusion import DiffusionConfig, EpsModel, bucket_edges, diffusion_pairs
from pillm.generative.features import RandomFeatureNet
from pillm.generative.flow import FlowConfig, flow_pairs
from pillm.generative.noise import block_seed

Pairs = Callable[[int, int], tuple[Tensor, Tensor, Tensor]]


@dataclass(frozen=True)
class AdamwOutConfig:
    """generative.adamw_out with the keys of generative.gradient it shares."""

    lr_grid: tuple[float, ...]
    lr_extend: int
    max_epochs: int
    batch_size: int
    warmup: int
    flat_evals: int
    flat_tol: float
    trained_drop: float
    anneal_epochs: int = 0  # passes of falling rate after the curve flattened (0: stop there)
    min_lr_frac: float = MIN_LR_FRAC  # the full-network arm's (train.TrainConfig)


@dataclass
class OutputRun:
    """One rate's training: the kept weights and the per-pass curve."""

    lr: float
    weight: Tensor  # (K, p, D) at the pass of the lowest held-out error
    first_loss: float  # the first batch's loss, before any update (the zero map's)
    seconds: float = 0.0  # training time to the stop, evaluations excluded
    best_epoch: int = 0
    capped: bool = False  # stopped by max_epochs, not by the flat rule
    anneal_from: int = 0  # the pass after which its rate annealed (0: it did not)
    curve: list[dict] = field(default_factory=list)  # per pass: epoch, step, seconds, y, loss

    @property
    def errors(self) -> list[float]:
        return [c["y"] for c in self.curve]

    @property
    def best(self) -> float:
        finite = [e for e in self.errors if math.isfinite(e)]
        return min(finite, default=math.inf)

    @property
    def best_train_loss(self) -> float:
        return self.curve[self.best_epoch - 1]["train_loss"] if self.best_epoch else math.nan


def solve_problem(
    cfg: FlowConfig | DiffusionConfig, x_fit: Tensor, seed: int, device: torch.device
) -> tuple[nn.Module, Callable[[Tensor, Tensor], Tensor], list[Pairs], int]:
    """The PIL fit's net (same random layer from ``seed``, output maps zero) and its training pairs:
    (model, features, one pair function per bucket, pairs per bucket), as fit_pil_flow and
    fit_pil_diffusion stream them."""
    dim = x_fit.shape[1]
    net = RandomFeatureNet(dim, dim, cfg.features, seed, trainable=False).to(device)
    n = cfg.pairs_per_image * x_fit.shape[0]
    if isinstance(cfg, FlowConfig):
        return net, net.features, [lambda a, b: flow_pairs(x_fit, a, b, seed, 0, device)], n
    model = EpsModel(net, cfg.timesteps, cfg.n_buckets).to(device)
    sched, edges = cfg.schedule(), bucket_edges(cfg.timesteps, cfg.n_buckets)

    def bucket(k: int) -> Pairs:
        span = (edges[k], edges[k + 1])
        return lambda a, b: diffusion_pairs(x_fit, a, b, seed, 10 + 2 * k, sched, span, device)

    return model, model.features, [bucket(k) for k in range(cfg.n_buckets)], n


@torch.no_grad()
def cache_rows(
    features: Callable[[Tensor, Tensor], Tensor], pairs: list[Pairs], n: int, chunk: int,
    device: torch.device,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """H (K, n, p) and targets (K, n, D), float32 on ``device``, chunk by chunk (TF32 off)."""
    h = y = None
    with tf32(False):
        for k, rows in enumerate(pairs):
            for a, b in chunk_ranges(n, chunk):
                x, t, target = rows(a, b)
                feats = features(x, t)
                if h is None:
                    h = torch.empty(len(pairs), n, feats.shape[1], device=device)
                    y = torch.empty(len(pairs), n, target.shape[1], device=device)
                h[k, a:b], y[k, a:b] = feats, target
    return h, y


@torch.no_grad()
def set_output(model: nn.Module, weight: Tensor) -> None:
    """Write (K, p, D) output maps into the PIL-shaped ``model`` (net.w_out or w_buckets)."""
    buckets = getattr(model, "w_buckets", None)
    if buckets is not None:
        buckets.copy_(weight)
    else:
        net = model.net if isinstance(model, EpsModel) else model
        net.w_out.copy_(weight[0])


def train_output_layer(
    h: Tensor, y: Tensor, lr: float, cfg: AdamwOutConfig, seed: int, device: torch.device,
    evaluate: Callable[[Tensor], float],
) -> OutputRun:  # fmt: skip
    """One rate's run (``train_output_layers`` of one rate)."""
    return train_output_layers(h, y, [lr], cfg, seed, device, evaluate)[lr]


def train_output_layers(
    h: Tensor, y: Tensor, lrs: Sequence[float], cfg: AdamwOutConfig, seed: int,
    device: torch.device, evaluate: Callable[[Tensor], float],
) -> dict[float, OutputRun]:  # fmt: skip
    """AdamW on W (K, p, D) per rate of ``lrs``, zero at the start, minimising mean ‖h W - y‖²
    over passes of the cached rows until its held-out curve (``evaluate(W)`` after each pass)
    flattens or ``cfg.max_epochs`` passes ran; the shuffles drawn from ``seed``.

    The rates train in lockstep: each step gathers one batch and multiplies it by every running
    rate's W at once (one wider product, so a grid takes about as long as its slowest rate, not
    the sum of its rates); each rate has its own AdamW state, schedule and stop, as if it ran
    alone on the same shuffles. A rate's ``seconds`` is its share of each pass it ran in (a
    pass's time split evenly over the rates running in it)."""
    k, n, p = h.shape
    rows = cfg.batch_size  # per bucket (output map) and step
    per_epoch = math.ceil(n / rows)
    total = cfg.max_epochs * per_epoch
    warmup = max(1, min(cfg.warmup, total // 10))
    ws = {lr: torch.zeros(k, p, y.shape[2], device=device, requires_grad=True) for lr in lrs}
    groups = [{"params": [w], "lr": lr} for lr, w in ws.items()]
    opt = AdamW(groups, weight_decay=0.0, fused=device.type == "cuda")
    g = torch.Generator(device=device).manual_seed(block_seed(seed, 7, 0))
    bucket = torch.arange(k, device=device)[:, None]
    runs = {lr: OutputRun(lr, w.detach().clone(), math.nan) for lr, w in ws.items()}
    running, step, first = list(ws), 0, None
    anneal_steps = cfg.anneal_epochs * per_epoch
    annealing: dict[float, tuple[int, float]] = {}  # rate -> (first step, rate there)

    def rate(lr: float) -> float:
        """The rate's value at ``step``: its schedule, or its anneal once the curve flattened."""
        if lr not in annealing:
            return lr_at(step, total, lr, warmup, cfg.min_lr_frac)
        start, top = annealing[lr]
        floor = min(top, cfg.min_lr_frac * lr)
        progress = min(1.0, (step - start + 1) / anneal_steps)  # the last step at the floor
        return floor + (top - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    rates = ", ".join(f"{lr:g}" for lr in lrs)
    progress = Progress(f"output layer, rates {rates}", cfg.max_epochs, "passes")
    for epoch in range(1, cfg.max_epochs + 1):
        order = torch.rand(k, n, generator=g, device=device).argsort(dim=1)  # a shuffle per bucket
        sse = torch.zeros(len(running), device=device)
        many = len(running) > 1
        sync(device)
        t0 = time.perf_counter()
        for i in range(per_epoch):
            idx = order[:, i * rows : (i + 1) * rows]
            for lr, group in zip(ws, opt.param_groups, strict=True):
                group["lr"] = rate(lr)
            x, target = h[bucket, idx], y[bucket, idx]
            if not many:  # one rate: its own product, no copy of its weights into a wider one
                losses = F.mse_loss(torch.bmm(x, ws[running[0]]), target)[None]
            else:  # every running rate's output from one product; the mean error per rate
                weight = torch.cat([ws[lr] for lr in running], dim=2)
                out = torch.bmm(x, weight).unflatten(2, (len(running), -1))
                losses = (out - target[:, :, None]).pow(2).mean(dim=(0, 1, 3))
            opt.zero_grad(set_to_none=True)  # a stopped rate keeps no gradient: AdamW skips it
            losses.sum().backward()
            opt.step()
            first = losses.detach() if first is None else first
            sse += losses.detach() * idx.shape[1]
            step += 1
        sync(device)
        share = (time.perf_counter() - t0) / len(running)
        for j, lr in enumerate(list(running)):
            run, w = runs[lr], ws[lr].detach()
            run.seconds += share
            err = evaluate(w)
            if math.isfinite(err) and err < run.best:  # the best before this pass
                run.weight, run.best_epoch = w.clone(), epoch
            run.curve.append({"epoch": epoch, "step": step, "seconds": run.seconds, "y": err,
                              "train_loss": float(sse[j]) / n,
                              "lr": opt.param_groups[lrs.index(lr)]["lr"]})  # fmt: skip
            if math.isnan(run.first_loss):
                run.first_loss = float(first[lrs.index(lr)])
            # Anneal (then stop) once the curve has flattened after the run has trained: a slow
            # start (a small rate's first passes) is not the flat end of a curve.
            learned = trained(run.first_loss, run.curve[-1]["train_loss"], cfg.trained_drop)
            flat = learned and flattened(run.errors, cfg.flat_evals, cfg.flat_tol)
            if not math.isfinite(err) or (flat and not anneal_steps) or (
                run.anneal_from and step - annealing[lr][0] >= anneal_steps
            ):  # diverged, flat without an anneal, or annealed
                running.remove(lr)
            elif flat and not run.anneal_from:
                annealing[lr], run.anneal_from = (step, rate(lr)), epoch
        # after the pass's evaluations: its errors are on the host
        best = min((runs[lr].best for lr in lrs), default=math.nan)
        progress.update(epoch, rates_running=len(running), best_heldout_mse=best)
        if not running:
            break
    for lr in running:
        runs[lr].capped = True
    return runs


def pick_rate(runs: dict[float, OutputRun]) -> float:
    """The rate of the lowest held-out error (the smaller on a tie); ValueError if all diverged."""
    finite = {lr: r.best for lr, r in runs.items() if math.isfinite(r.best)}
    if not finite:
        raise ValueError(f"every rate of generative.adamw_out.lr_grid diverged ({sorted(runs)}): "
                         "add smaller rates")  # fmt: skip
    return min(finite, key=lambda lr: (finite[lr], lr))


def fit_adamw_out(
    model_cfg: FlowConfig | DiffusionConfig, cfg: AdamwOutConfig, x_fit: Tensor, seed: int,
    device: str, evaluate: Callable[[nn.Module], float], lr: float | None = None,
) -> tuple[nn.Module, dict, list[dict]]:  # fmt: skip
    """The output-layer arm from ``seed``: cache the solve's rows, train each rate of the grid
    (or ``lr`` alone, the first seed's pick), keep the best on held-out images
    (``evaluate(model) -> held-out MSE``). Returns (model with the kept weights, metrics, curve
    rows)."""
    dev = torch.device(device)
    model, features, pairs, n = solve_problem(model_cfg, x_fit, seed, dev)
    say(f"output layer: caching the solve's rows ({n} per map)")
    sync(dev)
    t0 = time.perf_counter()
    h, y = cache_rows(features, pairs, n, model_cfg.chunk_size, dev)
    sync(dev)
    cache_seconds = time.perf_counter() - t0

    def held(weight: Tensor) -> float:
        set_output(model, weight)
        return evaluate(model)

    runs: dict[float, OutputRun] = {}

    def pick(grid: list[float]) -> tuple[OutputRun, float, dict[float, float]]:
        new = [lr for lr in grid if lr not in runs]  # in lockstep (train_output_layers)
        if new:
            with tf32(dev.type == "cuda"):
                runs.update(train_output_layers(h, y, new, cfg, seed, dev, held))
        lr = pick_rate({r: runs[r] for r in grid})
        return runs[lr], lr, {r: runs[r].best for r in grid}

    if lr is None:
        run, grid = search_grid(cfg.lr_grid, cfg.lr_extend, pick,
                                key="generative.adamw_out.lr_grid",
                                extend_key="generative.adamw_out.lr_extend")  # fmt: skip
        choice = {"lr_at_grid_edge": float(grid.edge_hit), "lr_extensions": float(grid.extensions),
                  "lr_on_edge": float(grid.on_edge), "lr_chosen_here": 1.0}  # fmt: skip
    else:
        run = pick([lr])[0]
        choice = {"lr_chosen_here": 0.0}  # the first seed's record says how it was chosen
    set_output(model, run.weight)
    k, _, p = h.shape
    gain = rel_gain(run.errors, cfg.flat_evals)
    metrics = {
        "fit_seconds": cache_seconds + run.seconds, "cache_seconds": cache_seconds,
        "tune_seconds": cache_seconds + sum(r.seconds for r in runs.values()),
        "adamw_lr": run.lr, "n_lrs": float(len(runs)), **choice,
        "epochs_run": float(len(run.curve)), "best_epoch": float(run.best_epoch),
        "anneal_from_epoch": float(run.anneal_from), "anneal_epochs": float(cfg.anneal_epochs),
        "max_epochs": float(cfg.max_epochs), "capped": float(run.capped),
        "flattened": float(flattened(run.errors, cfg.flat_evals, cfg.flat_tol)),
        **({} if gain is None else {"heldout_rel_gain": gain}),
        "train_pairs": float(k * n), "pair_visits": float(k * n * len(run.curve)),
        "batch_rows": float(k * cfg.batch_size),
        "first_train_loss": run.first_loss, "final_train_loss": run.best_train_loss,
        "trained": float(trained(run.first_loss, run.best_train_loss, cfg.trained_drop)),
        "heldout_mse_pass1": run.curve[0]["y"],
        "trainable_params": float(k * p * y.shape[2]), "n_features": float(p),
        "peak_memory_mb": peak_memory_mb(device),
    }  # fmt: skip
    curve = [{"curve": "adamw_out_heldout", "x": c["epoch"], "step": c["step"],
              "seconds": cache_seconds + c["seconds"], "y": c["y"], "loss": c["train_loss"]}
             for c in run.curve]  # fmt: skip
    curve += [{"curve": "adamw_out_grid", "x": c["epoch"], "lr": lr, "y": c["y"]}
              for lr, r in sorted(runs.items()) for c in r.curve]  # fmt: skip
    return model, metrics, curve
