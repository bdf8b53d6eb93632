"""Streaming float64 ridge regression for closed-form ("pseudoinverse learning") output weights.

Data are streamed once into Gram sufficient statistics (HᵀH, HᵀY, Σy², column sums, n), so
memory is O(p² + pk) whatever the number of rows. All solves then work on those statistics:

    W(λ) = (HᵀH + λI)⁻¹ HᵀY                                     (λ = 0: exact least squares)

Intercept: nothing here centres the data. Callers that want a bias append a ones column to H
(it is then penalised like any other weight when λ > 0); ``h_sum``/``y_sum`` are kept so a
caller can centre instead, and so held-out R² can use the held-out column means.

Every study picks λ the same way (``solve_relative``): on a grid relative to the mean feature
energy tr(HᵀH)/p, by held-out SSE, recorded as one ``RidgeFit``. ``stream_gram`` fills the
statistics chunk by chunk from a row generator.

Everything is float64 on the device of the statistics (inputs of any dtype are cast before
any matmul, so TF32 — which only affects float32 matmuls — never applies).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from pillm.core.ridge_defaults import KAPPA_MAX

_DTYPE = torch.float64
_EPS = torch.finfo(_DTYPE).eps


class RidgeFallbackWarning(RuntimeWarning):
    """Emitted when solve_ridge leaves the Cholesky path for the eigh pseudo-inverse."""


@dataclass
class GramStats:
    """Sufficient statistics of (H, Y) rows, all float64: sums of HᵀH, HᵀY, y², H, Y and n."""

    hth: Tensor  # (p, p)
    hty: Tensor  # (p, k)
    yty: Tensor  # (k,) per-output Σ y²
    h_sum: Tensor  # (p,)
    y_sum: Tensor  # (k,)
    n: int

    @classmethod
    def zeros(cls, p: int, k: int, device: torch.device | str | None = None) -> GramStats:
        """Empty statistics for p features and k outputs on ``device`` (default CPU)."""
        z = dict(dtype=_DTYPE, device=device)
        return cls(
            torch.zeros(p, p, **z), torch.zeros(p, k, **z), torch.zeros(k, **z),
            torch.zeros(p, **z), torch.zeros(k, **z), 0,
        )  # fmt: skip

    def update(self, h: Tensor, y: Tensor) -> None:
        """Accumulate one chunk: h (m, p), y (m, k) or (m,) when k == 1; any dtype/device."""
        p, k = self.hty.shape
        # Cast before the matmuls: float64 products are exact-as-possible and never TF32.
        h = h.to(device=self.hth.device, dtype=_DTYPE)
        y = y.to(device=self.hth.device, dtype=_DTYPE)
        if y.ndim == 1:
            y = y.unsqueeze(1)
        if h.ndim != 2 or h.shape[1] != p or y.shape != (h.shape[0], k):
            raise ValueError(f"expected h (m, {p}) and y (m, {k}); got {h.shape} and {y.shape}")
        self.hth += h.T @ h
        self.hty += h.T @ y
        self.yty += (y * y).sum(0)
        self.h_sum += h.sum(0)
        self.y_sum += y.sum(0)
        self.n += h.shape[0]

    def merge(self, other: GramStats) -> GramStats:
        """New statistics of the union of both row sets (e.g. from different workers)."""
        if self.hty.shape != other.hty.shape:
            raise ValueError(f"shape mismatch: {self.hty.shape} vs {other.hty.shape}")
        dev = self.hth.device
        return GramStats(
            self.hth + other.hth.to(dev), self.hty + other.hty.to(dev),
            self.yty + other.yty.to(dev), self.h_sum + other.h_sum.to(dev),
            self.y_sum + other.y_sum.to(dev), self.n + other.n,
        )  # fmt: skip


def accumulate_gram(
    chunks: Iterable[tuple[Tensor, Tensor]],
    p: int,
    k: int,
    device: torch.device | str | None = None,
) -> GramStats:
    """Stream (H, Y) chunks into GramStats; only one chunk is alive at a time.

    With ``device=None`` the statistics live on the device of the first chunk (CPU if empty).
    """
    stats: GramStats | None = None if device is None else GramStats.zeros(p, k, device)
    for h, y in chunks:
        if stats is None:
            stats = GramStats.zeros(p, k, h.device)
        stats.update(h, y)
    return stats if stats is not None else GramStats.zeros(p, k)


@dataclass
class RidgeSolution:
    """Weights (p, k) float64 plus how they were obtained (never a silent fallback)."""

    weight: Tensor
    lam: float
    kappa: float  # 2-norm condition number of HᵀH + λI (max|eig| / min|eig|)
    solver: str  # "cholesky" or "eigh"
    fallback_reason: str | None


def _as_gram(stats_or_hth: GramStats | Tensor, hty: Tensor | None) -> tuple[Tensor, Tensor]:
    if isinstance(stats_or_hth, GramStats):
        if hty is not None:
            raise ValueError("pass either GramStats or (hth, hty), not both")
        hth, hty = stats_or_hth.hth, stats_or_hth.hty
    else:
        if hty is None:
            raise ValueError("hty is required when hth is given as a tensor")
        hth = stats_or_hth
    hth = hth.to(dtype=_DTYPE)
    hty = hty.to(device=hth.device, dtype=_DTYPE)
    p = hth.shape[0]
    if hth.shape != (p, p) or hty.ndim != 2 or hty.shape[0] != p:
        raise ValueError(f"expected hth (p, p) and hty (p, k); got {hth.shape}, {hty.shape}")
    if not (torch.isfinite(hth).all() and torch.isfinite(hty).all()):
        raise ValueError("Gram statistics contain NaN or inf")
    # h.T @ h from BLAS need not be bitwise symmetric; eigh/cholesky read one triangle only,
    # so symmetrise to make the result independent of which triangle that is.
    return (hth + hth.T) / 2, hty


def _check_lam(lam: float) -> float:
    lam = float(lam)
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam}")
    return lam


def _pinv_diag(evals: Tensor, rtol: float | None) -> Tensor:
    """1/e for eigenvalues above rtol * max(e), else 0 (pseudo-inverse on the spectrum).

    Default rtol = p·eps, as scipy.linalg.pinvh: a Gram matrix in float64 cannot resolve
    eigenvalues below ~eps·max_eig, and inverting such noise would blow up the weights.
    Negative eigenvalues of a PSD matrix are rounding noise and are discarded too.
    """
    rtol = evals.shape[0] * _EPS if rtol is None else rtol
    cutoff = rtol * evals.max().clamp_min(0.0)
    keep = evals > cutoff
    return torch.where(keep, 1.0 / torch.where(keep, evals, 1.0), 0.0)


def _solve_cholesky(a: Tensor, b: Tensor) -> tuple[Tensor | None, int]:
    # A = L Lᵀ, then W = L⁻ᵀ L⁻¹ B: ~p³/3 flops, backward stable for SPD A.
    chol, info = torch.linalg.cholesky_ex(a)
    info_i = int(info.item())
    return (torch.cholesky_solve(b, chol) if info_i == 0 else None), info_i


def _solve_spectral(evals: Tensor, evecs: Tensor, b: Tensor, rtol: float | None) -> Tensor:
    # A = V diag(s) Vᵀ  =>  W = V diag(1/s⁺) Vᵀ B, 1/s⁺ = 0 for discarded s. Within the kept
    # subspace this is exact; outside it W has no component: the minimum-norm solution.
    return evecs @ (_pinv_diag(evals, rtol).unsqueeze(1) * (evecs.T @ b))


def solve_ridge(
    stats_or_hth: GramStats | Tensor,
    hty: Tensor | None = None,
    lam: float = 0.0,
    kappa_max: float = KAPPA_MAX,
    *,
    rtol: float | None = None,
    eig: tuple[Tensor, Tensor] | None = None,
) -> RidgeSolution:
    """Solve W = (HᵀH + λI)⁻¹ HᵀY from GramStats or from (hth, hty) tensors.

    Cholesky is used when κ(HᵀH + λI) <= kappa_max and the factorisation succeeds. Otherwise
    the eigh pseudo-inverse is used (eigenvalues below rtol·max_eig dropped, default p·eps),
    giving the minimum-norm solution — so λ = 0 with singular or duplicated features matches
    torch.linalg.pinv(H) @ Y. Any fallback emits RidgeFallbackWarning and is recorded in
    ``solver``/``fallback_reason``. The result is float64 on the statistics' device.
    ``eig``: (eigenvalues, eigenvectors) of the symmetrised HᵀH where the caller already has
    them (select_lambda): HᵀH + λI has the same eigenvectors and eigenvalues s + λ, so κ and a
    fallback need no further O(p³) decomposition.
    """
    lam = _check_lam(lam)
    hth, hty = _as_gram(stats_or_hth, hty)
    a = hth + lam * torch.eye(hth.shape[0], dtype=_DTYPE, device=hth.device)
    # κ from the spectrum (as exact as torch.linalg.cond for a symmetric matrix): what lets us
    # refuse Cholesky on numerically singular systems where it "succeeds" but returns weights
    # dominated by rounding error. Without ``eig`` it costs one O(p³) eigvalsh.
    abs_ev = (torch.linalg.eigvalsh(a) if eig is None else eig[0] + lam).abs()
    lo, hi = float(abs_ev.min()), float(abs_ev.max())
    kappa = hi / lo if lo > 0 else math.inf

    reason: str | None
    if kappa > kappa_max:
        reason = f"kappa={kappa:.3g} > {kappa_max:.3g}"
    else:
        weight, info = _solve_cholesky(a, hty)
        if weight is not None:
            return RidgeSolution(weight, lam, kappa, "cholesky", None)
        reason = f"cholesky failed: leading minor of order {info} is not positive definite"
    warnings.warn(
        f"solve_ridge(lam={lam:g}): {reason}; using eigh pseudo-inverse (min-norm)",
        RidgeFallbackWarning,
        stacklevel=2,
    )
    evals, evecs = torch.linalg.eigh(a) if eig is None else (eig[0] + lam, eig[1])
    return RidgeSolution(_solve_spectral(evals, evecs, hty, rtol), lam, kappa, "eigh", reason)


def ridge_path(
    stats_train: GramStats,
    lams: Sequence[float],
    *,
    rtol: float | None = None,
    eig: tuple[Tensor, Tensor] | None = None,
) -> list[Tensor]:
    """Weights for every λ from ONE eigendecomposition HᵀH = V diag(s) Vᵀ (``eig``: (s, V)
    where the caller already has it).

    W(λ) = V diag(1/(s+λ)) Vᵀ HᵀY, with the same pseudo-inverse cutoff as solve_ridge's
    eigh path so that λ = 0 on a singular problem gives the minimum-norm solution.
    """
    lams = [_check_lam(lam) for lam in lams]
    hth, hty = _as_gram(stats_train, None)
    s, v = torch.linalg.eigh(hth) if eig is None else eig
    z = v.T @ hty  # rotate HᵀY once; each λ is then O(p² k)
    return [v @ (_pinv_diag(s + lam, rtol).unsqueeze(1) * z) for lam in lams]


def spectrum(stats_train: GramStats) -> tuple[Tensor, Tensor]:
    """(eigenvalues, eigenvectors) of the symmetrised HᵀH: the one O(p³) decomposition a λ
    selection needs (select_lambda; a caller that selects again on the same statistics, e.g.
    on an extended grid, passes it back in)."""
    return torch.linalg.eigh(_as_gram(stats_train, None)[0])


def heldout_sse(weight: Tensor, stats_val: GramStats) -> Tensor:
    """Per-output Σ(y - h·w)² over the held-out rows, from their Gram statistics alone.

    ||y - Hw||² = yᵀy - 2 wᵀHᵀy + wᵀHᵀH w per column. Cancellation can make an exact fit a
    tiny negative number, so the result is clamped at 0.
    """
    w = weight.to(device=stats_val.hth.device, dtype=_DTYPE)
    if w.ndim == 1:
        w = w.unsqueeze(1)
    sse = stats_val.yty - 2 * (w * stats_val.hty).sum(0) + (w * (stats_val.hth @ w)).sum(0)
    return sse.clamp_min(0.0)


def select_lambda(
    stats_train: GramStats,
    stats_val: GramStats,
    lams: Sequence[float],
    kappa_max: float = KAPPA_MAX,
    eig: tuple[Tensor, Tensor] | None = None,
) -> tuple[RidgeSolution, dict[float, float]]:
    """Pick λ minimising total held-out SSE; return its solve_ridge solution and {λ: mse}.

    The curve comes from ridge_path; the final weights are re-solved through solve_ridge so κ
    and any fallback are recorded. Both use one eigendecomposition of HᵀH (the most expensive
    step; a second one for κ took about a third of the time); ``eig``: that decomposition
    (``spectrum(stats_train)``) where the caller has it. Ties go to the first λ in ``lams``.
    mse = total SSE / (n_val · k).
    """
    if len(lams) == 0:
        raise ValueError("lams must be non-empty")
    if stats_val.n == 0:
        raise ValueError("stats_val has no rows")
    denom = stats_val.n * stats_val.hty.shape[1]
    eig = spectrum(stats_train) if eig is None else eig
    weights = ridge_path(stats_train, lams, eig=eig)
    sses = [float(heldout_sse(w, stats_val).sum()) for w in weights]
    curve = {float(lam): sse / denom for lam, sse in zip(lams, sses, strict=True)}
    best = float(lams[min(range(len(sses)), key=sses.__getitem__)])
    return solve_ridge(stats_train, lam=best, kappa_max=kappa_max, eig=eig), curve


@dataclass
class RidgeFit:
    """How one closed-form output map was obtained: the record every study keeps per solve."""

    lam_rel: float  # chosen λ / (tr(HᵀH)/p)
    lam: float  # chosen absolute λ
    kappa: float
    solver: str  # "cholesky" or "eigh"
    fallback: str | None
    heldout_mse: float  # per output element, at the chosen λ
    curve: dict[float, float]  # relative λ -> held-out MSE, in grid order
    n_train: int
    n_val: int
    n_features: int
    solve_seconds: float
    gram_seconds: float = 0.0  # set by callers that stream the statistics
    peak_memory_mb: float = float("nan")  # CUDA: max allocated; CPU: process max RSS


def solve_relative(
    train: GramStats,
    heldout: GramStats,
    relative_lambdas: Sequence[float],
    kappa_max: float = KAPPA_MAX,
    eig: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, RidgeFit]:
    """Ridge with λ relative to the mean feature energy, chosen on held-out statistics.

    λ = r · tr(HᵀH)/p for every r in ``relative_lambdas`` (so one grid suits features of any
    scale; a zero trace falls back to scale 1); select_lambda picks the λ of least held-out
    SSE (``eig``: as select_lambda's). Returns the float64 weights (p, k) and the fit record,
    its curve keyed by r.
    """
    t0 = time.perf_counter()
    p = train.hth.shape[0]
    scale = float(torch.trace(train.hth)) / p or 1.0
    lams = [r * scale for r in relative_lambdas]
    sol, curve = select_lambda(train, heldout, lams, kappa_max=kappa_max, eig=eig)
    fit = RidgeFit(
        lam_rel=sol.lam / scale, lam=sol.lam, kappa=sol.kappa, solver=sol.solver,
        fallback=sol.fallback_reason, heldout_mse=curve[sol.lam],
        curve={r: curve[lam] for r, lam in zip(relative_lambdas, lams, strict=True)},
        n_train=train.n, n_val=heldout.n, n_features=p,
        solve_seconds=time.perf_counter() - t0,
    )  # fmt: skip
    return sol.weight, fit


# ---------------------------------------------------------------- streaming rows into statistics


def chunk_ranges(n: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """[start, stop) ranges of at most ``chunk_size`` covering 0..n in order."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    for start in range(0, n, chunk_size):
        yield start, min(start + chunk_size, n)


def split_heldout(x: Tensor, fraction: float) -> tuple[Tensor, Tensor]:
    """The last ``fraction`` of rows (at least one) as held-out; rows are assumed shuffled."""
    n_val = max(1, round(x.shape[0] * fraction))
    if n_val >= x.shape[0]:
        raise ValueError(f"heldout_fraction={fraction} leaves no training rows of {x.shape[0]}")
    return x[:-n_val], x[-n_val:]


@torch.no_grad()
def stream_gram(
    features: Callable[[Tensor, Tensor], Tensor],
    pairs: Callable[[int, int], tuple[Tensor, Tensor, Tensor]],
    n_pairs: int,
    shape: tuple[int, int],
    chunk_size: int,
    device: torch.device,
    desc: str | None = None,
) -> GramStats:
    """Σ HᵀH, HᵀY (``shape`` = (p, k)) over ``n_pairs`` rows: ``pairs(start, stop)`` gives
    (x, t, y) for a chunk and H = ``features(x, t)``; one chunk is alive at a time.
    """
    stats = GramStats.zeros(*shape, device=device)
    ranges = list(chunk_ranges(n_pairs, chunk_size))
    bar = tqdm(ranges, desc=desc, file=sys.stderr, mininterval=5, ascii=True,
               disable=desc is None or len(ranges) < 8)  # fmt: skip
    for start, stop in bar:
        x, t, y = pairs(start, stop)
        stats.update(features(x, t), y)
    return stats


def r2_score_from_stats(weight: Tensor, stats_val: GramStats) -> tuple[float, Tensor]:
    """Held-out R² from Gram statistics: (global, per-output (k,) float64).

    SST is taken around the held-out column means: Σy² - (Σy)²/n. Global R² is
    1 - ΣSSE / ΣSST over outputs. As scikit-learn's r2_score, a constant target (SST = 0)
    scores 1.0 if predicted exactly and 0.0 otherwise. SST suffers cancellation when
    |mean| ≫ std; callers with such targets should centre Y before streaming.
    """
    if stats_val.n == 0:
        raise ValueError("stats_val has no rows")
    sse = heldout_sse(weight, stats_val)
    sst = (stats_val.yty - stats_val.y_sum**2 / stats_val.n).clamp_min(0.0)

    def _r2(e: Tensor, t: Tensor) -> Tensor:
        return torch.where(t > 0, 1 - e / torch.where(t > 0, t, 1.0), (e == 0).to(_DTYPE))

    return float(_r2(sse.sum(), sst.sum())), _r2(sse, sst)
