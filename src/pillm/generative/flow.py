"""PIL flow matching: a velocity field solved in closed form on random features of (x_t, t).

Flow matching on the straight (rectified / optimal-transport) path between noise and data:

    x_t = (1 - t) x0 + t x1,   x0 ~ N(0, I),  x1 ~ data,  t ~ U(0, 1)
    v(x_t, t) ≈ x1 - x0                         (its least-squares optimum is E[x1 - x0 | x_t, t])

The network has one hidden layer of fixed random features of the input and a time embedding,

    H = [φ([x_t, e(t)] W_1 + b_1), ..., φ([x_t, e(t)] W_m + b_m), (x_t,) 1]    (W_i, b_i fixed)
    W_out = (HᵀH + λI)⁻¹ Hᵀ (x1 - x0)                                          (ridge.py, float64)

(x_t appears only with ``direct_link``, an RVFL-style skip; off by default.) e(t) is sinusoidal
(highest angular frequency ``time_scale``, default 10: on MNIST it gave a lower held-out MSE
than the DDPM convention 1000 for both flow and ε-prediction) or raw t.

``m = 1`` is single PIL, ``m = 2`` the project's "Bi-PIL" (two random projections concatenated,
as in pil.py; not the TNNLS forward/backward scheme). (x0, t, x1) pairs are generated and
streamed chunk by chunk into float64 Gram statistics, so memory is O(p² + p·D) whatever the
number of pairs, and λ is chosen on pairs built from held-out images. The noise of pair i comes
from a generator keyed by (seed, stream, i // BLOCK), never from the chunk it lands in: any
chunk size gives the same rows, hence the same weights up to float64 summation order.

Samples come from integrating dx/dt = v(x, t) from t = 0 to 1 with Euler or Heun (2nd order).
The gradient baseline is the same network (same init) with every weight trained by AdamW on the
flow-matching loss (``train_regression``); diffusion.py reuses all of these pieces.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from pillm.accel.cuda_graph import GraphedStep
from pillm.core.ridge import RidgeFit, chunk_ranges, solve_relative, split_heldout, stream_gram
from pillm.core.runtime import lr_at, peak_memory_mb, sync

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
    "sin": torch.sin,  # random Fourier features
}
TIME_ENCODINGS = ("sinusoidal", "raw")
ODE_METHODS = ("euler", "heun")
BLOCK = 1024  # rows per noise block: the unit of the chunk-independent random stream
DEFAULT_LAMBDAS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # × tr(HᵀH)/p


@dataclass(frozen=True)
class FeatureConfig:
    """Random-feature layer: ``n_proj`` projections of ``width`` features each, plus a bias."""

    width: int = 2048
    n_proj: int = 1  # 1: single PIL; 2: Bi-PIL (two projections concatenated)
    activation: str = "gelu"
    time_encoding: str = "sinusoidal"  # or "raw" (t itself)
    time_dim: int = 64  # sinusoidal embedding size (ignored for "raw")
    time_scale: float = 10.0  # sinusoidal: highest angular frequency in t ∈ [0, 1]
    time_weight: float = 1.0  # std of the time embedding's share of a pre-activation
    bias_scale: float = 0.5
    direct_link: bool = False  # also feed x itself to the output layer (RVFL-style skip)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation {self.activation!r} unknown; choose from {list(ACTIVATIONS)}"
            )
        if self.time_encoding not in TIME_ENCODINGS:
            raise ValueError(
                f"time_encoding {self.time_encoding!r} unknown; choose from {TIME_ENCODINGS}"
            )
        if self.width < 1 or self.n_proj < 1:
            raise ValueError(f"width and n_proj must be >= 1, got {self.width}, {self.n_proj}")
        if self.time_encoding == "sinusoidal" and (self.time_dim < 2 or self.time_dim % 2):
            raise ValueError(f"time_dim must be even and >= 2, got {self.time_dim}")

    def n_features(self, dim: int) -> int:
        """Columns of H for inputs of size ``dim``: m·w random features, [x,] and a ones column."""
        return self.n_proj * self.width + (dim if self.direct_link else 0) + 1


def time_embedding(t: Tensor, encoding: str, dim: int, scale: float = 10.0) -> Tensor:
    """t (n,) in [0, 1] -> (n, dim) sinusoidal or (n, 1) raw.

    Sinusoidal: [sin(s t ω_i), cos(s t ω_i)], ω_i = 10000^(-i/(dim/2)), s = ``scale``; with
    s = 1000 this is the Transformer / DDPM embedding of the step index t·1000.
    """
    t = t.reshape(-1, 1).float()
    if encoding == "raw":
        return t
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = scale * t * freqs
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


ALIGN = 4  # a trainable net's feature count is a multiple of this (16-byte float32 rows)


class RandomFeatureNet(nn.Module):
    """y = [φ([x, e(t)] W + b), (x,) 1] W_out with m projections; frozen (PIL) or all trainable.

    ``direct_link`` adds x itself as features (a random-vector-functional-link skip), so a map
    linear in x needs no approximation by the random features.

    W_x ~ N(0, 1/D) and W_t scaled so the time embedding adds variance ``time_weight²`` to a
    pre-activation (E e_i² = 1/2 for sinusoidal, E t² = 1/3 for raw t). The first layer is drawn
    from ``seed`` alone, so the PIL net and its gradient-trained twin start identical. W_out (p, k)
    starts at zero; the last feature is a constant 1, so W_out's last row is the output bias.

    A trainable net pads H with zero features up to a multiple of ``ALIGN`` columns (W_out with
    zero rows): p = width + D + 1 is odd, and float32 rows of odd length are not 16-byte aligned,
    which keeps cuBLAS off Hopper's TMA-fed TF32 kernels. A zero feature adds exact zeros to
    every product and gives its W_out row a zero gradient, so AdamW never moves it (m = v = 0,
    decay of 0): the function and the trained weights are the unpadded net's, only faster (the
    output layer's forward and backward 2.1x at CIFAR-10's batch 512 on an H200,
    benchmarks/gemm_align.py). ``trainable_params`` does not count the padding.
    """

    def __init__(self, dim: int, out_dim: int, cfg: FeatureConfig, seed: int, trainable: bool):
        super().__init__()
        self.cfg, self.dim, self.out_dim, self.trainable = cfg, dim, out_dim, trainable
        g = torch.Generator().manual_seed(seed)
        m, w = cfg.n_proj, cfg.width
        p = cfg.n_features(dim)
        self.pad = -p % ALIGN if trainable else 0  # zero features (see above)
        e = 1 if cfg.time_encoding == "raw" else cfg.time_dim
        e_sq = 1 / 3 if cfg.time_encoding == "raw" else 1 / 2
        tensors = {
            "w_x": torch.randn(m, dim, w, generator=g) / math.sqrt(dim),
            "w_t": torch.randn(m, e, w, generator=g) * cfg.time_weight / math.sqrt(e * e_sq),
            "b": cfg.bias_scale * torch.randn(m, w, generator=g),
            "w_out": torch.zeros(p + self.pad, out_dim),
        }
        for name, value in tensors.items():
            if trainable:
                self.register_parameter(name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)

    @property
    def n_features(self) -> int:
        """Columns of H, the alignment padding not counted."""
        return self.w_out.shape[0] - self.pad

    def features(self, x: Tensor, t: Tensor) -> Tensor:
        """x (n, D), t (n,) or scalar in [0, 1] -> H (n, m·w [+ D] + 1 [+ pad]) float32."""
        n = x.shape[0]
        t = torch.as_tensor(t, dtype=torch.float32, device=x.device).expand(n)
        emb = time_embedding(t, self.cfg.time_encoding, self.cfg.time_dim, self.cfg.time_scale)
        z = torch.einsum("nd,mdw->nmw", x.float(), self.w_x)  # (n, m, w)
        z = z + torch.einsum("ne,mew->nmw", emb, self.w_t) + self.b
        h = ACTIVATIONS[self.cfg.activation](z).flatten(1)  # (n, m·w)
        skip = [x.float()] if self.cfg.direct_link else []
        ones = torch.ones_like(h[:, :1])
        pad = [h.new_zeros(n, self.pad)] if self.pad else []
        return torch.cat([h, *skip, ones, *pad], dim=1)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return self.features(x, t) @ self.w_out


@torch.no_grad()
def align_features(model: nn.Module) -> nn.Module:
    """Pad every solved (PIL) RandomFeatureNet in ``model`` with zero features to a multiple of
    ``ALIGN``, in place, as a trainable net is padded from the start: W_out (and an EpsModel's
    ``w_buckets``) get zero rows, so the function is unchanged. The solve runs unpadded (its
    Gram would be singular in the zero features); the samplers then run both arms' output
    layers on aligned rows, so a sampling time compares methods, not memory alignment. The
    function is the same up to summation order; the pipeline aligns on CUDA only, where the GEMM
    kernels depend on it: on the CPU the padding changed the smoke build's PIL sample metrics in
    the seventh digit, and the CPU results stay bit-identical. Returns ``model``."""
    for net in [m for m in model.modules() if isinstance(m, RandomFeatureNet)]:
        pad = -net.w_out.shape[0] % ALIGN
        if pad == 0:
            continue
        net.pad += pad
        net.w_out = F.pad(net.w_out, (0, 0, 0, pad))
        buckets = getattr(model, "w_buckets", None)
        if buckets is not None and getattr(model, "net", None) is net:
            model.w_buckets = F.pad(buckets, (0, 0, 0, pad))
    return model


def trainable_params(model: nn.Module) -> int:
    """Weights a gradient arm trains: every trainable parameter less the zero rows of W_out (or
    of each bucket's map) that a trainable net's alignment padding adds."""
    pad = sum(m.pad for m in model.modules() if isinstance(m, RandomFeatureNet))
    total = 0
    for name, p in model.named_parameters():
        if p.requires_grad:
            total += p.numel()
            if name.endswith(("w_out", "w_buckets")):  # (p + pad, D) or (K, p + pad, D)
                total -= p.numel() // p.shape[-2] * pad
    return total


# ---------------------------------------------------------------- chunk-independent noise stream


def block_seed(seed: int, stream: int, block: int) -> int:
    return (seed * 1_000_003 + stream * 998_244_353 + block * 2_654_435_761) % (2**63 - 1)


def noise_rows(
    seed: int, stream: int, start: int, stop: int, dim: int, device: torch.device | str
) -> tuple[Tensor, Tensor]:
    """Rows [start, stop) of an endless (x0 ~ N(0, I_dim), u ~ U(0, 1)) stream, on ``device``.

    Row i depends only on (seed, stream, i): each BLOCK of rows has its own generator, and a
    block is always drawn whole, so how rows are chunked never changes their values.
    """
    xs, us = [], []
    for b in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        g = torch.Generator(device=device).manual_seed(block_seed(seed, stream, b))
        x0 = torch.randn(BLOCK, dim, generator=g, device=device)
        u = torch.rand(BLOCK, generator=g, device=device)
        lo, hi = max(start - b * BLOCK, 0), min(stop - b * BLOCK, BLOCK)
        xs.append(x0[lo:hi])
        us.append(u[lo:hi])
    return torch.cat(xs), torch.cat(us)


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


@dataclass(frozen=True)
class TrainConfig:
    """AdamW with linear warm-up and cosine decay, a fixed step budget."""

    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 100
    min_lr_frac: float = 0.1
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
    opt = torch.optim.AdamW(
        params, lr=lr, weight_decay=cfg.weight_decay, fused=cuda, capturable=cuda
    )

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
    curve, window, heldout, rows = [], [], [], 0
    t0, paused = time.perf_counter(), 0.0  # paused: seconds spent evaluating, not training
    for step in tqdm(range(cfg.steps), desc=desc, file=sys.stderr, mininterval=5, ascii=True):
        rate = lr_at(step, cfg.steps, cfg.lr, cfg.warmup, cfg.min_lr_frac)
        if cuda:
            lr.fill_(rate)  # a device write, no sync
        else:
            for group in opt.param_groups:
                group["lr"] = rate
        x, t, y = batch(step)
        rows = rows or x.shape[0]
        window.append(runner(x, t, y))
        if step == (runner.warmup if cuda else 0):  # after the first (CUDA: the captured) step
            sync(device)
            t0 = time.perf_counter()
        if len(window) == cfg.log_every or step == cfg.steps - 1:
            curve.append((step + 1, float(torch.stack(window).mean())))
            window = []
        last = step == cfg.steps - 1
        if evaluate is not None and (last or (eval_every and (step + 1) % eval_every == 0)):
            sync(device)
            stop = time.perf_counter()
            net.eval()
            heldout.append((step + 1, stop - t0 - paused, evaluate(net)))
            net.train()
            sync(device)
            paused += time.perf_counter() - stop
    sync(device)
    seconds = time.perf_counter() - t0 - paused
    net.eval()
    return TrainReport(
        cfg.steps, seconds, curve[-1][1], curve, peak_memory_mb(str(device)), heldout,
        runner.graphed, rows,
    )  # fmt: skip


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
