"""The generative fits' network: fixed random features of (x_t, t) and one output map.

One hidden layer of fixed random features of the input and a time embedding,

    H = [φ([x_t, e(t)] W_1 + b_1), ..., φ([x_t, e(t)] W_m + b_m), (x_t,) 1]    (W_i, b_i fixed)

and a linear output map W_out (p, D). A PIL fit solves W_out by ridge on streamed float64 Gram
statistics (flow.py, diffusion.py; core/ridge.py), λ picked from ``DEFAULT_LAMBDAS`` on held-out
pairs; the gradient baseline trains every weight of the same net by AdamW (train.py).

(x_t appears only with ``direct_link``, an RVFL-style skip; off by default.) e(t) is sinusoidal
(highest angular frequency ``time_scale``, default 10: on MNIST it gave a lower held-out MSE
than the DDPM convention 1000 for both flow and ε-prediction) or raw t.

``m = 1`` is single PIL, ``m = 2`` the project's "Bi-PIL" (two random projections concatenated,
as in pil.py; not the TNNLS forward/backward scheme).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
    "sin": torch.sin,  # random Fourier features
}
TIME_ENCODINGS = ("sinusoidal", "raw")
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
    decay of 0): the function and the trained weights are the unpadded net's, only faster
    (benchmarks/gemm_align.py; figures in docs/performance.md). ``trainable_params`` does not
    count the padding.
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
    kernels depend on it: on the CPU the padding changes the smoke build's PIL sample metrics in
    the seventh digit, so a CPU job samples the net as solved. Returns ``model``."""
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
