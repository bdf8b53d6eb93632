"""PIL flow matching: a velocity field solved in closed form on random features of (x_t, t).

Flow matching on the straight (rectified / optimal-transport) path between noise and data:

    x_t = (1 - t) x0 + t x1,   x0 ~ N(0, I),  x1 ~ data,  t ~ U(0, 1)
    v(x_t, t) ≈ x1 - x0                         (its least-squares optimum is E[x1 - x0 | x_t, t])

The velocity is the random-feature net of features.py, its output map solved by ridge:

    W_out = (HᵀH + λI)⁻¹ Hᵀ (x1 - x0)                                          (ridge.py, float64)

(x0, t, x1) pairs are generated and streamed chunk by chunk into float64 Gram statistics, so
memory is O(p² + p·D) whatever the number of pairs, and λ is chosen on pairs built from held-out
images. The pairs' noise comes from the chunk-independent stream of noise.py: any chunk size
gives the same rows, hence the same weights up to float64 summation order.

Samples come from integrating dx/dt = v(x, t) from t = 0 to 1 with Euler or Heun (2nd order).
The gradient baseline is the same network (same init) with every weight trained by AdamW on the
flow-matching loss (train.py's ``train_regression``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch import Tensor

from pillm.core.ridge import RidgeFit, chunk_ranges, solve_relative, split_heldout, stream_gram
from pillm.core.runtime import peak_memory_mb, sync
from pillm.generative.features import DEFAULT_LAMBDAS, FeatureConfig, RandomFeatureNet
from pillm.generative.noise import block_seed, noise_rows
from pillm.generative.train import TrainConfig, TrainReport, train_regression

ODE_METHODS = ("euler", "heun")


def flow_pairs(
    x1: Tensor, start: int, stop: int, seed: int, stream: int, device: torch.device | str
) -> tuple[Tensor, Tensor, Tensor]:
    """Pairs [start, stop): pair i uses image i mod n. Returns (x_t, t, target x1 - x0)."""
    n, dim = x1.shape
    idx = torch.arange(start, stop, device=x1.device) % n
    data = x1[idx].to(device=device, dtype=torch.float32)
    x0, t = noise_rows(seed, stream, start, stop, dim, device)
    xt = (1 - t[:, None]) * x0 + t[:, None] * data
    return xt, t, data - x0


# ---------------------------------------------------------------- closed-form fit


@dataclass(frozen=True)
class FlowConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    pairs_per_image: int = 1  # noise/time draws per training image
    chunk_size: int = 4096  # pairs per streamed chunk (memory knob only; result unchanged)
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS  # relative to tr(HᵀH)/p, picked on held-out
    heldout_fraction: float = 0.1  # of x_train, used only when x_val is not given
    kappa_max: float = 1e10


@torch.no_grad()
def fit_pil_flow(
    x_train: Tensor,
    cfg: FlowConfig,
    seed: int,
    device: str | torch.device = "cpu",
    x_val: Tensor | None = None,
) -> tuple[RandomFeatureNet, RidgeFit]:
    """Closed-form flow matching: W_out = argmin Σ‖H(x_t, t) W - (x1 - x0)‖² + λ‖W‖².

    ``x_train`` (n, D) data rows (any device; moved chunk by chunk). Held-out images: ``x_val``,
    else the last ``heldout_fraction`` of ``x_train``. Deterministic given ``seed`` on a device.
    """
    device = torch.device(device)
    if x_val is None:
        x_train, x_val = split_heldout(x_train, cfg.heldout_fraction)
    dim = x_train.shape[1]
    net = RandomFeatureNet(dim, dim, cfg.features, seed, trainable=False).to(device)
    sync(device)
    t0 = time.perf_counter()
    k = cfg.pairs_per_image
    shape = (net.n_features, dim)
    train = stream_gram(
        net.features, lambda a, b: flow_pairs(x_train, a, b, seed, 0, device),
        k * x_train.shape[0], shape, cfg.chunk_size, device, desc="flow gram",
    )  # fmt: skip
    val = stream_gram(
        net.features, lambda a, b: flow_pairs(x_val, a, b, seed, 1, device),
        k * x_val.shape[0], shape, cfg.chunk_size, device,
    )  # fmt: skip
    sync(device)
    gram_seconds = time.perf_counter() - t0
    w, fit = solve_relative(train, val, cfg.lambdas, cfg.kappa_max)
    net.w_out.copy_(w.to(torch.float32))
    fit.gram_seconds = gram_seconds
    fit.peak_memory_mb = peak_memory_mb(str(device))
    return net, fit


@torch.no_grad()
def flow_heldout_mse(
    velocity: Callable[[Tensor, Tensor], Tensor],
    x_val: Tensor,
    seed: int,
    pairs_per_image: int = 1,
    chunk_size: int = 4096,
    device: str | torch.device = "cpu",
) -> float:
    """Mean ‖v(x_t, t) - (x1 - x0)‖² / D over the held-out pairs fit_pil_flow selects λ on."""
    device = torch.device(device)
    n = pairs_per_image * x_val.shape[0]
    sse = 0.0
    for a, b in chunk_ranges(n, chunk_size):
        xt, t, y = flow_pairs(x_val, a, b, seed, 1, device)
        sse += float(((velocity(xt, t) - y).double() ** 2).sum())
    return sse / (n * x_val.shape[1])


# ---------------------------------------------------------------- ODE sampling


@torch.no_grad()
def integrate_ode(
    velocity: Callable[[Tensor, Tensor], Tensor],
    x: Tensor,
    steps: int,
    method: str = "heun",
    t0: float = 0.0,
    t1: float = 1.0,
) -> Tensor:
    """Integrate dx/dt = v(x, t) on a uniform grid of ``steps`` steps from t0 to t1.

    Euler: x += h v(x, t). Heun (explicit trapezoid, 2nd order, 2 evaluations per step):
    k1 = v(x, t), k2 = v(x + h k1, t + h), x += h (k1 + k2) / 2.
    """
    if method not in ODE_METHODS:
        raise ValueError(f"ODE method {method!r} unknown; choose from {ODE_METHODS}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    h = (t1 - t0) / steps
    for i in range(steps):
        t = t0 + i * h
        k1 = velocity(x, torch.full((x.shape[0],), t, device=x.device))
        if method == "euler":
            x = x + h * k1
        else:
            k2 = velocity(x + h * k1, torch.full((x.shape[0],), t + h, device=x.device))
            x = x + 0.5 * h * (k1 + k2)
    return x


@torch.no_grad()
def sample_flow(
    velocity: Callable[[Tensor, Tensor], Tensor],
    n: int,
    dim: int,
    steps: int,
    method: str = "heun",
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 2048,
) -> Tensor:
    """n samples: x0 ~ N(0, I) from stream 2 of ``seed``, pushed through the ODE to t = 1."""
    out = []
    for a, b in chunk_ranges(n, batch_size):
        x0, _ = noise_rows(seed, 2, a, b, dim, device)
        out.append(integrate_ode(velocity, x0, steps, method))
    return torch.cat(out)


# ---------------------------------------------------------------- gradient baseline


def train_gradient_flow(
    x_train: Tensor,
    features: FeatureConfig,
    train_cfg: TrainConfig,
    seed: int,
    device: str | torch.device = "cpu",
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 0,
) -> tuple[RandomFeatureNet, TrainReport]:
    """The PIL flow's network (same init from ``seed``), every weight trained end to end.

    Each step draws ``batch_size`` images (with replacement) and fresh (x0, t), all from one
    generator on ``device`` seeded by ``seed``. ``evaluate``: see ``train_regression``.
    """
    device = torch.device(device)
    n, dim = x_train.shape
    net = RandomFeatureNet(dim, dim, features, seed, trainable=True).to(device)
    g = torch.Generator(device=device).manual_seed(block_seed(seed, 3, 0))
    data = x_train.to(device=device, dtype=torch.float32)
    bs = train_cfg.batch_size

    def batch(step: int) -> tuple[Tensor, Tensor, Tensor]:
        x1 = data[torch.randint(n, (bs,), generator=g, device=device)]
        x0 = torch.randn(bs, dim, generator=g, device=device)
        t = torch.rand(bs, generator=g, device=device)
        return (1 - t[:, None]) * x0 + t[:, None] * x1, t, x1 - x0

    report = train_regression(net, batch, train_cfg, device, "flow AdamW", evaluate, eval_every)
    return net, report
