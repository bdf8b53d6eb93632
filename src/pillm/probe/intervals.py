"""Percentile-bootstrap intervals of the probe's correlations between per-block quantities, and
the percentiles every probe interval takes (``pillm.probe.refit``: R²_lin over windows).

A correlation between per-block quantities is only meaningful within one model (pooling models
mixes their scales: Simpson's paradox), so ``bootstrap_blocks`` takes the blocks of one model
group. Where the group holds several seeds of one architecture (the pillm baseline), the blocks
of one seed are not independent of each other's seed-mates in the way the blocks of different
seeds are, so the statistic is computed within each seed and averaged over seeds, and its
interval is a hierarchical bootstrap: seeds with replacement, then within each drawn seed its
blocks with replacement. A difference of two statistics on the same resample is paired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95


def percentiles(values: np.ndarray) -> tuple[float | None, float | None]:
    """(lo, hi) of the 95 % percentile interval of the finite ``values``; (None, None) if none."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None, None
    alpha = (1 - LEVEL) / 2
    lo, hi = np.percentile(v, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def recentred(values: np.ndarray, point: float) -> tuple[float | None, float | None]:
    """``percentiles`` of ``values`` shifted by ``point`` minus their median: the interval of a
    bootstrap whose resamples are biased against the sample (``pillm.probe.refit``)."""
    v = values[np.isfinite(values)]
    lo, hi = percentiles(v)
    if lo is None or hi is None or not math.isfinite(point):
        return None, None
    shift = point - float(np.median(v))
    return lo + shift, hi + shift


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
    """A statistic over n blocks with its 95 % percentile-bootstrap interval (None: undefined);
    for several seeds, the mean over ``seeds`` of the statistic within each seed, ``blocks``
    the fewest blocks of one seed (of the only seed's otherwise)."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int
    seeds: int = 1
    blocks: int = -1  # -1: n (one seed)

    @property
    def per_seed(self) -> int:
        """Blocks behind one correlation: the fewest of one seed."""
        return self.n if self.blocks < 0 else self.blocks


Statistic = Callable[[Mapping[str, np.ndarray]], float]


def bootstrap_blocks(
    columns: Mapping[str, Sequence[float | None]],
    statistic: Statistic,
    resamples: int,
    seed: int = 0,
    seeds: Sequence[Hashable] | None = None,
) -> Estimate:
    """``statistic`` of the blocks (rows where every column is finite) with a percentile
    bootstrap over blocks: each resample draws blocks with replacement, all columns together.
    With ``seeds`` (each row's seed) of more than one seed: the mean over seeds of the statistic
    within each seed, bootstrapped hierarchically (``hierarchical``)."""
    arr = {
        k: np.asarray([np.nan if v is None else v for v in c], float) for k, c in columns.items()
    }
    ok = np.logical_and.reduce([np.isfinite(a) for a in arr.values()])
    arr = {k: a[ok] for k, a in arr.items()}
    n = int(ok.sum())
    if seeds is not None:
        kept = [s for s, good in zip(seeds, ok, strict=True) if good]
        if len(set(kept)) > 1:
            return hierarchical(arr, kept, statistic, resamples, seed)
    value = statistic(arr) if n else math.nan
    if not math.isfinite(value):
        return Estimate(None, None, None, n)
    if n < 3 or resamples <= 0:
        return Estimate(value, None, None, n)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    boots = np.array([statistic({k: a[i] for k, a in arr.items()}) for i in idx])
    lo, hi = percentiles(boots)
    return Estimate(value, lo, hi, n)


def _seed_mean(parts: Sequence[Mapping[str, np.ndarray]], statistic: Statistic) -> float:
    vals = np.array([statistic(p) for p in parts])
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else math.nan


def hierarchical(
    arr: Mapping[str, np.ndarray],
    seeds: Sequence[Hashable],
    statistic: Statistic,
    resamples: int,
    seed: int = 0,
) -> Estimate:
    """The mean over seeds of ``statistic`` within each seed (seeds whose statistic is
    undefined left out), with a hierarchical percentile bootstrap: each resample draws the seeds
    with replacement, then within each drawn seed as many of its blocks with replacement."""
    order = list(dict.fromkeys(seeds))
    where = np.asarray([order.index(s) for s in seeds])
    parts = [{k: a[where == g] for k, a in arr.items()} for g in range(len(order))]
    sizes = [int((where == g).sum()) for g in range(len(order))]
    shape = dict(n=len(seeds), seeds=len(order), blocks=min(sizes))
    value = _seed_mean(parts, statistic)
    if not math.isfinite(value):
        return Estimate(None, None, None, **shape)
    if resamples <= 0:
        return Estimate(value, None, None, **shape)
    rng = np.random.default_rng(seed)
    boots = np.empty(resamples)
    for r in range(resamples):
        drawn = []
        for g in rng.integers(0, len(parts), size=len(parts)):
            idx = rng.integers(0, sizes[g], size=sizes[g])  # one draw for all columns: paired
            drawn.append({k: a[idx] for k, a in parts[g].items()})
        boots[r] = _seed_mean(drawn, statistic)
    lo, hi = percentiles(boots)
    return Estimate(value, lo, hi, **shape)


def rank_corr(x: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    """The statistic ρ(x, y) for ``bootstrap_blocks``."""
    return lambda a: spearman(a[x], a[y])


def rank_corr_diff(x1: str, x2: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    """The statistic ρ(x1, y) - ρ(x2, y) (paired: both on the same resample of blocks)."""
    return lambda a: spearman(a[x1], a[y]) - spearman(a[x2], a[y])


def linear_corr(x: str, y: str) -> Callable[[Mapping[str, np.ndarray]], float]:
    return lambda a: pearson(a[x], a[y])
