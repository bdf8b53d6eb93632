"""Percentile-bootstrap intervals of the probe: R²_lin over held-out windows, correlations over
the blocks of one model.

R²_lin pools squared errors over rows, so its sampling unit is a window of consecutive tokens,
not a row: ``WindowScores`` keeps per held-out window and output coordinate the row count, Σy,
Σy² and the squared error of a fitted map, and a resample of windows is a weighted sum of those.
A correlation between per-block quantities is only meaningful within one model (pooling models
mixes their scales: Simpson's paradox), so ``bootstrap_blocks`` resamples the blocks of one
model; a difference of two statistics on the same resample is paired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:  # torch only where windows are scored (probe jobs), not in the tables rule
    from torch import Tensor

LEVEL = 0.95


@dataclass
class WindowScores:
    """Per held-out window w and output j: rows n[w], Σy s[w, j], Σy² q[w, j] and the squared
    error Σ(y - ŷ)² e[w, j] of one fitted map (float64 numpy arrays)."""

    n: np.ndarray
    s: np.ndarray
    q: np.ndarray
    e: np.ndarray

    @classmethod
    def of(cls, y: Tensor, pred: Tensor, window: Tensor, n_windows: int) -> WindowScores:
        """Scores of one batch: rows y (m, k), predictions (m, k), each row's window (m,).

        On CUDA the window sums run in PyTorch's deterministic mode: ``index_add_``'s atomics
        add in another order each run, and two builds of the paper DAG differed in the last bit
        of 4-5 bootstrap bounds (r2_lin_lo / hi) for that reason alone. (Toggled here, not by
        ``pillm.core.runtime.deterministic``: this module's table side stays torch-free.)"""
        k = y.shape[1]
        import torch

        z = dict(dtype=torch.float64, device=y.device)
        n, s, q, e = (torch.zeros(n_windows, **z), *(torch.zeros(n_windows, k, **z) for _ in "sqe"))
        y = y.to(torch.float64)
        was = torch.are_deterministic_algorithms_enabled()
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        if y.is_cuda:
            torch.use_deterministic_algorithms(True)
        try:
            n.index_add_(0, window, torch.ones(len(window), **z))
            s.index_add_(0, window, y)
            q.index_add_(0, window, y * y)
            e.index_add_(0, window, (y - pred.to(torch.float64)) ** 2)
        finally:
            torch.use_deterministic_algorithms(was, warn_only=warn_only)
        return cls(*(t.cpu().numpy() for t in (n, s, q, e)))

    @classmethod
    def cat(cls, parts: Sequence[WindowScores]) -> WindowScores:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in "nsqe"))

    @property
    def windows(self) -> int:
        return int((self.n > 0).sum())

    def r2(self, counts: np.ndarray | None = None) -> np.ndarray | float:
        """Global R² = 1 - ΣSSE / ΣSST (SST around the held-out means); with ``counts`` (R, W),
        the R² of each resample that takes window w counts[r, w] times."""
        if counts is None:
            return float(_r2(self.n[None], self.s[None], self.q[None], self.e[None], None)[0])
        return _r2(self.n, self.s, self.q, self.e, counts)


def _r2(n, s, q, e, counts) -> np.ndarray:
    if counts is not None:
        n, s, q, e = counts @ n, counts @ s, counts @ q, counts @ e
    else:
        n, s, q, e = n.sum(1), s.sum(1), q.sum(1), e.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sst = np.clip(q - s**2 / n[:, None], 0.0, None).sum(1)
        return np.where(sst > 0, 1 - e.sum(1) / np.where(sst > 0, sst, 1.0), np.nan)


def _counts(n_units: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n_units) multiplicities of a bootstrap resample of the units."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_units, size=(resamples, n_units))
    out = np.zeros((resamples, n_units))
    np.add.at(out, (np.arange(resamples)[:, None], idx), 1.0)
    return out


def _percentiles(values: np.ndarray) -> tuple[float | None, float | None]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None, None
    alpha = (1 - LEVEL) / 2
    lo, hi = np.percentile(v, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def bootstrap_r2(scores: WindowScores, resamples: int, seed: int = 0) -> tuple[float | None, ...]:
    """(lo, hi) of the 95 % percentile bootstrap of R² over held-out windows (rows-weighted, as
    R² itself); (None, None) with fewer than 2 windows."""
    used = scores.n > 0
    if used.sum() < 2 or resamples <= 0:
        return None, None
    sc = WindowScores(scores.n[used], scores.s[used], scores.q[used], scores.e[used])
    return _percentiles(sc.r2(_counts(len(sc.n), resamples, seed)))  # type: ignore[arg-type]


# ---------------------------------------------------------------- correlations over blocks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (average ranks); NaN for < 3 pairs or a constant column."""
    if len(x) < 3:
        return math.nan
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r; NaN for < 3 pairs or a constant column."""
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


@dataclass(frozen=True)
class Estimate:
    """A statistic over n units with its 95 % percentile-bootstrap interval (None: undefined)."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int


def bootstrap_blocks(
    columns: Mapping[str, Sequence[float | None]],
    statistic: Callable[[Mapping[str, np.ndarray]], float],
    resamples: int,
    seed: int = 0,
) -> Estimate:
    """``statistic`` of the blocks (rows where every column is finite) with a percentile
    bootstrap over blocks: each resample draws blocks with replacement, all columns together."""
    arr = {
        k: np.asarray([np.nan if v is None else v for v in c], float) for k, c in columns.items()
    }
    ok = np.logical_and.reduce([np.isfinite(a) for a in arr.values()])
    arr = {k: a[ok] for k, a in arr.items()}
    n = int(ok.sum())
    value = statistic(arr) if n else math.nan
    if not math.isfinite(value):
        return Estimate(None, None, None, n)
    if n < 3 or resamples <= 0:
        return Estimate(value, None, None, n)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    boots = np.array([statistic({k: a[i] for k, a in arr.items()}) for i in idx])
    lo, hi = _percentiles(boots)
    return Estimate(value, lo, hi, n)


def rank_corr(x: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    """The statistic ρ(x, y) for ``bootstrap_blocks``."""
    return lambda a: spearman(a[x], a[y])


def rank_corr_diff(x1: str, x2: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    """The statistic ρ(x1, y) - ρ(x2, y) (paired: both on the same resample of blocks)."""
    return lambda a: spearman(a[x1], a[y]) - spearman(a[x2], a[y])


def linear_corr(x: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    return lambda a: pearson(a[x], a[y])
