"""The generative fits' gradient baseline: every weight of a net trained by AdamW on a regression.

``train_regression`` minimises the mean squared error of ``net(x, t)`` against targets over a
fixed budget of batches, with linear warm-up and cosine decay, its held-out error recorded along
the way with the clock stopped; flow.py and diffusion.py draw the batches (flow matching's
velocity, DDPM's ε) and run it on the same network a PIL fit solves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from pillm.accel.cuda_graph import GraphedStep
from pillm.core.adamw import AdamW
from pillm.core.log import Progress, say
from pillm.core.runtime import lr_at, peak_memory_mb, sync
from pillm.generative.convergence import MIN_LR_FRAC


@dataclass(frozen=True)
class TrainConfig:
    """AdamW with linear warm-up and cosine decay, a fixed step budget."""

    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 100
    min_lr_frac: float = MIN_LR_FRAC
    log_every: int = 50
    bf16: bool = False  # CUDA only: the forward and backward under bf16 autocast (fp32 weights)


@dataclass
class TrainReport:
    steps: int
    seconds: float
    final_loss: float  # mean of the last log_every batch losses
    curve: list[tuple[int, float]]  # (step, mean loss of the preceding log_every steps)
    peak_memory_mb: float
    # (step, training seconds so far, held-out MSE) every eval_every steps and at the end;
    # the clock is stopped while evaluating, so seconds are training time only.
    heldout: list[tuple[int, float, float]] = field(default_factory=list)
    cuda_graphs: bool = False  # whether the steps replayed from a CUDA graph
    batch_rows: int = 0  # rows of each training batch
    first_loss: float = float("nan")  # the first step's batch loss, before any update


def train_regression(
    net: nn.Module,
    batch: Callable[[int], tuple[Tensor, Tensor, Tensor]],
    cfg: TrainConfig,
    device: str | torch.device = "cpu",
    desc: str = "train",
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 0,
    cuda_graphs: bool = True,
    forward: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> TrainReport:
    """Minimise mean ‖net(x, t) - y‖² over ``cfg.steps`` batches ``batch(step) -> (x, t, y)``.

    ``forward``: the training forward in place of ``net(x, t)`` where the batches have a layout
    it exploits (EpsModel.forward_stratified); ``evaluate`` still receives ``net``.

    On CUDA (unless ``cuda_graphs`` is off) the step replays from a CUDA graph after a few eager
    calls (pillm.accel.cuda_graph: a step of this small net is launch-bound); the CPU step is the
    plain eager loop.
    The clock starts after the first step (CUDA: after the captured one; warm-up and capture
    excluded, as PIL's clock excludes the solver libraries' start-up) and stops synchronized. With
    ``evaluate`` (net -> held-out MSE), every ``eval_every`` steps and after the last one the
    held-out error is recorded with the training time so far, the clock stopped meanwhile.
    """
    device = torch.device(device)
    params = [p for p in net.parameters() if p.requires_grad]
    if not params:
        raise ValueError("net has no trainable parameters (a PIL net? use trainable=True)")
    cuda = device.type == "cuda"
    # CUDA: the step (forward, backward, fused AdamW) replays from a CUDA graph, so the rate
    # is a device tensor each step overwrites; the batch is drawn outside the graph, eagerly.
    lr = torch.tensor(float(cfg.lr), device=device) if cuda else cfg.lr
    opt = AdamW(params, lr=lr, weight_decay=cfg.weight_decay, fused=cuda, capturable=cuda)

    train_forward = net if forward is None else forward

    def one_step(x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        with torch.autocast("cuda", torch.bfloat16, enabled=cuda and cfg.bf16):
            loss = F.mse_loss(train_forward(x, t).float(), y)
        loss.backward()
        opt.step()
        return loss.detach()

    runner = GraphedStep(
        one_step, cuda and cuda_graphs, lambda: opt.zero_grad(set_to_none=True), name=desc
    )
    net.train()
    curve, window, heldout, rows, first = [], [], [], 0, None
    t0, paused = time.perf_counter(), 0.0  # paused: seconds spent evaluating, not training
    progress, notes = Progress(desc, cfg.steps), {}
    say(f"{desc}: {cfg.steps} steps on {device.type}")
    for step in range(cfg.steps):
        rate = lr_at(step, cfg.steps, cfg.lr, cfg.warmup, cfg.min_lr_frac)
        if cuda:
            lr.fill_(rate)  # a device write, no sync
        else:
            for group in opt.param_groups:
                group["lr"] = rate
        x, t, y = batch(step)
        rows = rows or x.shape[0]
        window.append(runner(x, t, y))
        first = window[0] if first is None else first  # a device tensor: no sync here
        if step == (runner.warmup if cuda else 0):  # after the first (CUDA: the captured) step
            sync(device)
            t0 = time.perf_counter()
        if len(window) == cfg.log_every or step == cfg.steps - 1:
            curve.append((step + 1, float(torch.stack(window).mean())))
            window = []
            notes["train_loss"] = curve[-1][1]  # read here already: no extra wait for the GPU
        last = step == cfg.steps - 1
        if evaluate is not None and (last or (eval_every and (step + 1) % eval_every == 0)):
            sync(device)
            stop = time.perf_counter()
            net.eval()
            heldout.append((step + 1, stop - t0 - paused, evaluate(net)))
            notes["heldout_mse"] = heldout[-1][2]
            net.train()
            sync(device)
            paused += time.perf_counter() - stop
        progress.update(step + 1, **notes)
    sync(device)
    seconds = time.perf_counter() - t0 - paused
    net.eval()
    return TrainReport(
        cfg.steps, seconds, curve[-1][1], curve, peak_memory_mb(str(device)), heldout,
        runner.graphed, rows, float(first),
    )  # fmt: skip
