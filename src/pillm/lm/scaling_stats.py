"""Trend tests of the scaling study, torch-free: a slope per doubling with a bootstrap interval
over seeds, and its verdict against a declared equivalence margin.

For an axis with points i = 1..k at sizes N_i (parameters or training tokens) and, at each
point, one value y_ij per seed j (an attention share, say), the slope is the least-squares
slope of the point means against log2 N_i: the change of the value per doubling of N. Its
interval is a percentile bootstrap that resamples the seeds of each point independently (the
runs at different points are independent trainings; seeds are the replicates), refitting the
slope each time. The verdict compares the interval with the margin m, declared before the
runs ("flat within +-m per doubling"):

* ``flat``: the interval lies inside (-m, m);
* ``grows`` / ``shrinks``: the interval lies wholly above +m / below -m: a direction is stated
  only when the interval excludes the margin, not merely zero;
* ``undecided``: anything else (the interval straddles a margin);
* ``no interval (1 seed)`` where a point has a single seed; ``too few points`` below two.

With few seeds a percentile bootstrap is narrower than the sampling spread (with n seeds the
resampled means' variance is (n-1)/n of the plug-in one); the paper states the seed count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

FLAT = "flat"
GROWS = "grows"
SHRINKS = "shrinks"
UNDECIDED = "undecided"
NO_INTERVAL = "no interval (1 seed)"
TOO_FEW = "too few points"
BOOT_METHOD = "percentile bootstrap, seeds resampled per point"


def ols_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (x not all equal)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xc = xa - xa.mean()
    return float((xc * (ya - ya.mean())).sum() / (xc * xc).sum())


def slope_interval(
    sizes: Sequence[float],
    values: Sequence[Sequence[float]],
    resamples: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Slope of the point means per doubling of ``sizes`` and its 95 % bootstrap interval.

    ``values[i]``: the per-seed values at point i. Returns {slope, lo, hi, n_points, n_seeds}
    (``n_seeds`` the fewest at any point); lo and hi are None where a point has one seed or
    there are fewer than two points (then the slope is None too)."""
    vals = [np.asarray([v for v in vs if math.isfinite(v)], dtype=float) for vs in values]
    keep = [i for i, v in enumerate(vals) if len(v)]
    x = np.log2(np.asarray([sizes[i] for i in keep], dtype=float))
    vals = [vals[i] for i in keep]
    out: dict[str, Any] = {
        "slope": None,
        "lo": None,
        "hi": None,
        "n_points": len(vals),
        "n_seeds": min((len(v) for v in vals), default=0),
    }
    if len(vals) < 2 or np.ptp(x) == 0:
        return out
    out["slope"] = ols_slope(x, [v.mean() for v in vals])
    if out["n_seeds"] < 2:
        return out
    rng = np.random.default_rng(seed)
    means = np.stack(
        [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in vals], axis=1
    )  # (resamples, points)
    xc = x - x.mean()
    slopes = (means - means.mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    lo, hi = np.percentile(slopes, [2.5, 97.5])
    out.update(lo=float(lo), hi=float(hi))
    return out


def trend_verdict(slope: float | None, lo: float | None, hi: float | None, margin: float) -> str:
    """The verdict of a slope's interval against the margin (see the module docstring)."""
    if slope is None:
        return TOO_FEW
    if lo is None or hi is None:
        return NO_INTERVAL
    if -margin < lo and hi < margin:
        return FLAT
    if lo > margin:
        return GROWS
    if hi < -margin:
        return SHRINKS
    return UNDECIDED


def trend(
    sizes: Sequence[float],
    values: Sequence[Sequence[float]],
    margin: float,
    resamples: int,
    seed: int = 0,
) -> dict[str, Any]:
    """``slope_interval`` plus its ``verdict`` against ``margin``."""
    out = slope_interval(sizes, values, resamples, seed)
    out["verdict"] = trend_verdict(out["slope"], out["lo"], out["hi"], margin)
    return out


def power_exponent(x: Sequence[float], t: Sequence[float]) -> float | None:
    """The exponent b of t ~ x^b fitted in log-log (None below two distinct x)."""
    pairs = [(a, b) for a, b in zip(x, t, strict=True) if a > 0 and b > 0]
    if len({a for a, _ in pairs}) < 2:
        return None
    return ols_slope([math.log(a) for a, _ in pairs], [math.log(b) for _, b in pairs])
