"""PIL diffusion: DDPM ε-prediction solved in closed form on random features of (x_t, t).

Forward process with a linear β schedule (Ho et al. 2020), time index t = 0 … T-1:

    x_t = √ᾱ_t x + √(1 - ᾱ_t) ε,   ε ~ N(0, I),   ᾱ_t = Π_{s<=t} (1 - β_s)

The ε-predictor is the random-feature net of features.py on [x_t, e(t / T)], its output map solved by
ridge (float64 Gram streamed in chunks, λ on held-out images):

    W_out = (HᵀH + λI)⁻¹ Hᵀ ε

either once for all timesteps (``n_buckets = 1``, shared weights) or once per contiguous bucket
of timesteps (``n_buckets = K``; ``K = T`` is per-timestep weights). Buckets are solved one after
another, each from ``pairs_per_image`` draws per training image with t uniform in the bucket, so
Gram memory stays O(p²) and the cost grows K-fold; the K weight sets take K·p·D floats.

Sampling is DDPM ancestral sampling from x_{T-1} ~ N(0, I):

    x_{t-1} = (x_t - β_t / √(1 - ᾱ_t) · ε̂(x_t, t)) / √α_t + σ_t z,   σ_t² = β_t or β̃_t

(the seed document's sampler divides by √ᾱ_t instead of √α_t; that is not DDPM and is not
reproduced). ``clip_x0`` offers Ho et al.'s clipped-x̂ variant of the same step. Without
``direct_link`` the random features approximate the near-identity ε̂ ≈ x_t of large t poorly
and unclipped MNIST chains diverge; see FeatureConfig. The gradient baseline is the same network
(same init, the same number of ε weight sets: shared, or one per bucket) with every weight trained
by AdamW on the ε-MSE; with buckets, each batch holds equal rows per bucket (as the solve), so a
step multiplies each row by its own bucket's map only.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn as nn
from torch import Tensor

from pillm.core.ridge import RidgeFit, chunk_ranges, solve_relative, split_heldout, stream_gram
from pillm.core.runtime import peak_memory_mb, sync
from pillm.generative.features import DEFAULT_LAMBDAS, FeatureConfig, RandomFeatureNet
from pillm.generative.noise import block_seed, noise_rows
from pillm.generative.train import TrainConfig, TrainReport, train_regression

VARIANCES = ("beta", "posterior")


@dataclass(frozen=True)
class DDPMSchedule:
    """β_t (T,) float64 and the derived α_t = 1 - β_t, ᾱ_t = Π α_s."""

    betas: Tensor

    @property
    def T(self) -> int:
        return self.betas.shape[0]

    @property
    def alphas(self) -> Tensor:
        return 1.0 - self.betas

    @property
    def alpha_bars(self) -> Tensor:
        return torch.cumprod(self.alphas, 0)


def linear_beta_schedule(
    timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02
) -> DDPMSchedule:
    """β linear from β_start to β_end, both scaled by 1000 / T (so ᾱ_T ≈ 4e-5 for any T)."""
    if timesteps < 2:
        raise ValueError(f"timesteps must be >= 2, got {timesteps}")
    scale = 1000.0 / timesteps
    if not 0 < beta_start * scale <= beta_end * scale < 1:
        raise ValueError(
            f"need 0 < beta_start <= beta_end and beta_end * 1000/T < 1; got "
            f"beta_start={beta_start}, beta_end={beta_end}, T={timesteps}"
        )
    betas = torch.linspace(beta_start * scale, beta_end * scale, timesteps, dtype=torch.float64)
    return DDPMSchedule(betas)


def bucket_edges(timesteps: int, n_buckets: int) -> list[int]:
    """K + 1 integer edges splitting 0 … T into K contiguous, near-equal buckets."""
    if not 1 <= n_buckets <= timesteps:
        raise ValueError(f"n_buckets must be in [1, T={timesteps}], got {n_buckets}")
    return [round(b * timesteps / n_buckets) for b in range(n_buckets + 1)]


class EpsModel(nn.Module):
    """ε̂(x_t, t) for integer t: a RandomFeatureNet fed t / T, with 1 or K output maps.

    ``w_buckets`` (K, p, D) holds per-bucket maps (K > 1): solved (PIL) or, with ``trainable``,
    trained by AdamW together with the shared random layer (the net's own ``w_out`` is then
    frozen and unused). Otherwise the net's ``w_out`` is used (one weight set for every t).
    """

    def __init__(
        self, net: RandomFeatureNet, timesteps: int, n_buckets: int = 1, trainable: bool = False
    ):
        super().__init__()
        self.net, self.timesteps = net, timesteps
        edges = bucket_edges(timesteps, n_buckets)
        self.register_buffer("edges", torch.tensor(edges[1:-1], dtype=torch.long))
        self.inner_edges = edges[1:-1]  # host copy for the sampler's one-timestep calls
        if n_buckets == 1:
            self.register_buffer("w_buckets", None)
            return
        w_buckets = torch.zeros(n_buckets, *net.w_out.shape, device=net.w_out.device)
        if trainable:
            net.w_out.requires_grad_(False)
            self.w_buckets = nn.Parameter(w_buckets)
        else:
            self.register_buffer("w_buckets", w_buckets)

    @property
    def n_buckets(self) -> int:
        return 1 if self.w_buckets is None else self.w_buckets.shape[0]

    def bucket_of(self, t: Tensor) -> Tensor:
        return torch.bucketize(t, self.edges, right=True)

    def features(self, x: Tensor, t: Tensor) -> Tensor:
        """H of (x_t, integer t): the net's random features at time t / T."""
        t = torch.as_tensor(t, device=x.device).expand(x.shape[0])
        return self.net.features(x, t.float() / self.timesteps)

    def forward(self, x: Tensor, t: Tensor | int) -> Tensor:
        if isinstance(t, int):
            # One timestep for all rows (the sampler): filled on the device, and the bucket
            # picked on the host. torch.as_tensor of a Python int would copy it from pageable
            # memory, a host sync per sampling step.
            b = bisect.bisect_right(self.inner_edges, t)
            t = torch.full((x.shape[0],), t, device=x.device)
            if self.w_buckets is not None:
                return self.features(x, t) @ self.w_buckets[b]
        t = torch.as_tensor(t, device=x.device).expand(x.shape[0])
        if self.w_buckets is None:
            return self.net(x, t.float() / self.timesteps)
        h = self.features(x, t)
        # Any t (held-out batches): every row through every map, then each row keeps its own
        # bucket's: K times one map's FLOPs, but no host sync and no per-bucket kernels. Training
        # batches drawn stratified take forward_stratified: one map per row.
        every = torch.einsum("np,kpd->knd", h, self.w_buckets)
        return every[self.bucket_of(t), torch.arange(x.shape[0], device=x.device)]

    def forward_stratified(self, x: Tensor, t: Tensor) -> Tensor:
        """ε̂ of rows grouped by bucket, the same number in each, bucket 0's first (as
        ``stratified_timesteps`` draws them): one batched matmul, each row through its own map."""
        h = self.features(x, t)
        out = torch.bmm(h.reshape(self.n_buckets, -1, h.shape[1]), self.w_buckets)
        return out.view(x.shape[0], -1)


def stratified_timesteps(
    edges: list[int], rows_per_bucket: int, device: torch.device
) -> Callable[[torch.Generator], Tensor]:
    """A sampler of ``rows_per_bucket`` timesteps uniform in each bucket ``[edges[b],
    edges[b+1])``, grouped by bucket in order (its tensors made once: no host copy per draw).
    With equal-width buckets (T a multiple of K) the mean loss over such a batch estimates the
    loss at t uniform over all T without bias, as the PIL solve's equal rows per bucket do;
    otherwise each bucket weighs 1/K (widths differ by at most one timestep)."""
    e = torch.tensor(edges, device=device)
    lo = e[:-1].repeat_interleave(rows_per_bucket)
    width = (e[1:] - e[:-1]).repeat_interleave(rows_per_bucket)

    def draw(generator: torch.Generator) -> Tensor:
        u = torch.rand(lo.shape[0], generator=generator, device=device)
        return lo + (u * width).long().clamp_max(width - 1)

    return draw


def diffusion_pairs(
    data: Tensor,
    start: int,
    stop: int,
    seed: int,
    stream: int,
    sched: DDPMSchedule,
    t_range: tuple[int, int],
    device: torch.device | str,
) -> tuple[Tensor, Tensor, Tensor]:
    """Pairs [start, stop): pair i noises image i mod n at t uniform in [lo, hi). (x_t, t, ε)."""
    n, dim = data.shape
    x = data[torch.arange(start, stop, device=data.device) % n].to(device, torch.float32)
    eps, u = noise_rows(seed, stream, start, stop, dim, device)
    lo, hi = t_range
    t = (lo + (u * (hi - lo)).long()).clamp_max(hi - 1)
    ab = sched.alpha_bars.to(device)[t].float()[:, None]
    return ab.sqrt() * x + (1 - ab).sqrt() * eps, t, eps


@dataclass(frozen=True)
class DiffusionConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    timesteps: int = 1000
    beta_start: float = 1e-4
    beta_end: float = 0.02
    n_buckets: int = 1  # 1: weights shared across t; T: per-timestep; else per bucket
    pairs_per_image: int = 1  # draws per training image, per bucket
    chunk_size: int = 4096
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS
    heldout_fraction: float = 0.1
    kappa_max: float = 1e10

    def schedule(self) -> DDPMSchedule:
        return linear_beta_schedule(self.timesteps, self.beta_start, self.beta_end)


@torch.no_grad()
def fit_pil_diffusion(
    x_train: Tensor,
    cfg: DiffusionConfig,
    seed: int,
    device: str | torch.device = "cpu",
    x_val: Tensor | None = None,
) -> tuple[EpsModel, list[RidgeFit]]:
    """Closed-form ε-prediction, one ridge solve per timestep bucket (one for shared weights).

    Returns the model and one RidgeFit per bucket (λ chosen per bucket on held-out images).
    """
    device = torch.device(device)
    if x_val is None:
        x_train, x_val = split_heldout(x_train, cfg.heldout_fraction)
    dim = x_train.shape[1]
    sched = cfg.schedule()
    net = RandomFeatureNet(dim, dim, cfg.features, seed, trainable=False).to(device)
    model = EpsModel(net, cfg.timesteps, cfg.n_buckets).to(device)
    edges = bucket_edges(cfg.timesteps, cfg.n_buckets)
    k = cfg.pairs_per_image
    shape = (net.n_features, dim)
    fits = []
    for b in range(cfg.n_buckets):
        t_range = (edges[b], edges[b + 1])
        sync(device)
        t0 = time.perf_counter()

        stats = []
        for data, stream in ((x_train, 10 + 2 * b), (x_val, 11 + 2 * b)):
            pairs = partial(
                diffusion_pairs, data, seed=seed, stream=stream, sched=sched,
                t_range=t_range, device=device,
            )  # fmt: skip
            desc = f"eps gram bucket {b + 1}/{cfg.n_buckets}" if data is x_train else None
            n = k * data.shape[0]
            stats.append(stream_gram(model.features, pairs, n, shape, cfg.chunk_size, device, desc))
        train, val = stats
        sync(device)
        gram_seconds = time.perf_counter() - t0
        w, fit = solve_relative(train, val, cfg.lambdas, cfg.kappa_max)
        w = w.to(torch.float32)
        fit.gram_seconds = gram_seconds
        fit.peak_memory_mb = peak_memory_mb(str(device))
        fits.append(fit)
        if model.w_buckets is None:
            net.w_out.copy_(w)
        else:
            model.w_buckets[b].copy_(w)
    return model, fits


@torch.no_grad()
def eps_heldout_mse(
    model: Callable[[Tensor, Tensor], Tensor],
    x_val: Tensor,
    sched: DDPMSchedule,
    seed: int,
    pairs_per_image: int = 1,
    chunk_size: int = 4096,
    device: str | torch.device = "cpu",
) -> float:
    """Mean ‖ε̂(x_t, t) - ε‖² / D on held-out images, t uniform over all T (same for any model)."""
    n = pairs_per_image * x_val.shape[0]
    sse = 0.0
    for a, b in chunk_ranges(n, chunk_size):
        xt, t, eps = diffusion_pairs(x_val, a, b, seed, 9, sched, (0, sched.T), device)
        sse += float(((model(xt, t) - eps).double() ** 2).sum())
    return sse / (n * x_val.shape[1])


@torch.no_grad()
def sample_ddpm(
    model: Callable[[Tensor, Tensor], Tensor],
    n: int,
    dim: int,
    sched: DDPMSchedule,
    seed: int = 0,
    device: str | torch.device = "cpu",
    variance: str = "beta",
    batch_size: int = 2048,
    clip_x0: float | None = None,
) -> Tensor:
    """DDPM ancestral sampling of n rows; σ_t² = β_t ("beta") or β̃_t ("posterior").

    β̃_t = β_t (1 - ᾱ_{t-1}) / (1 - ᾱ_t). No noise is added at the last step (t = 0).
    Row i depends only on (seed, i). ``clip_x0 = c`` (Ho et al.'s released sampler uses c = 1 for images in [-1, 1]): predict
    x̂ = (x_t - √(1 - ᾱ_t) ε̂) / √ᾱ_t, clip it to [-c, c], and step to the posterior mean
    √ᾱ_{t-1} β_t / (1 - ᾱ_t) x̂ + √α_t (1 - ᾱ_{t-1}) / (1 - ᾱ_t) x_t — without clipping this
    is the same step as the ε form above.
    """
    if variance not in VARIANCES:
        raise ValueError(f"variance {variance!r} unknown; choose from {VARIANCES}")
    device = torch.device(device)
    # Per-step constants as Python floats (computed once in float64, no device syncs in the loop).
    betas, alphas, ab = sched.betas, sched.alphas, sched.alpha_bars
    ab_prev = torch.cat([ab.new_ones(1), ab[:-1]])
    var = betas * (1 - ab_prev) / (1 - ab) if variance == "posterior" else betas
    eps_coef = (betas / (1 - ab).sqrt()).tolist()
    inv_sqrt_alpha = alphas.rsqrt().tolist()
    sigma = var.sqrt().tolist()
    x0_from_x, x0_from_eps = ab.rsqrt().tolist(), ((1 - ab) / ab).sqrt().tolist()
    mean_x0 = (ab_prev.sqrt() * betas / (1 - ab)).tolist()
    mean_xt = (alphas.sqrt() * (1 - ab_prev) / (1 - ab)).tolist()
    out = []
    for a, b in chunk_ranges(n, batch_size):
        x, _ = noise_rows(seed, 4, a, b, dim, device)
        for t in range(sched.T - 1, -1, -1):
            # EpsModel takes the Python int (its bucket is picked on the host: no device sync).
            t_in = t if isinstance(model, EpsModel) else torch.full((b - a,), t, device=device)
            eps = model(x, t_in)
            if clip_x0 is None:
                x = (x - eps_coef[t] * eps) * inv_sqrt_alpha[t]
            else:
                x0 = (x0_from_x[t] * x - x0_from_eps[t] * eps).clamp(-clip_x0, clip_x0)
                x = mean_x0[t] * x0 + mean_xt[t] * x
            if t > 0:
                # z of row i at step t comes from its own stream: samples do not depend on
                # n or batch_size, only on (seed, row).
                x = x + sigma[t] * noise_rows(seed, -1 - t, a, b, dim, device)[0]
        out.append(x)
    return torch.cat(out)


def train_gradient_diffusion(
    x_train: Tensor,
    cfg: DiffusionConfig,
    train_cfg: TrainConfig,
    seed: int,
    device: str | torch.device = "cpu",
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 0,
) -> tuple[EpsModel, TrainReport]:
    """The PIL ε-net's shape (same init from ``seed``: ``cfg.n_buckets`` output maps over t on
    one shared random layer), every weight trained end to end.

    Each step draws images (with replacement) and fresh ε; with shared weights ``batch_size``
    rows with t uniform over all T, with K bucket maps ``batch_size // K`` rows per bucket with t
    uniform in it (``stratified_timesteps``; the PIL solve also takes equal rows per bucket), so
    each row goes through its own bucket's map only. ``evaluate``: see train_regression.
    """
    device = torch.device(device)
    n, dim = x_train.shape
    sched = cfg.schedule()
    net = RandomFeatureNet(dim, dim, cfg.features, seed, trainable=True).to(device)
    model = EpsModel(net, cfg.timesteps, cfg.n_buckets, trainable=True).to(device)
    g = torch.Generator(device=device).manual_seed(block_seed(seed, 6, 0))
    data = x_train.to(device=device, dtype=torch.float32)
    alpha_bars = sched.alpha_bars.to(device).float()
    k = cfg.n_buckets
    if train_cfg.batch_size < k:
        raise ValueError(f"batch_size {train_cfg.batch_size} < n_buckets {k}: a bucket would get "
                         "no rows; raise generative.gradient.batch_size")  # fmt: skip
    bs = train_cfg.batch_size // k * k
    stratified = stratified_timesteps(bucket_edges(cfg.timesteps, k), bs // k, device)

    def draw_t() -> Tensor:
        if k == 1:
            return torch.randint(cfg.timesteps, (bs,), generator=g, device=device)
        return stratified(g)

    def batch(step: int) -> tuple[Tensor, Tensor, Tensor]:
        x = data[torch.randint(n, (bs,), generator=g, device=device)]
        eps = torch.randn(bs, dim, generator=g, device=device)
        t = draw_t()
        ab = alpha_bars[t][:, None]
        return ab.sqrt() * x + (1 - ab).sqrt() * eps, t, eps

    forward = model.forward_stratified if k > 1 else None
    report = train_regression(
        model, batch, train_cfg, device, "eps AdamW", evaluate, eval_every, forward=forward
    )
    return model, report
