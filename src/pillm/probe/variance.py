"""Where a block's held-out output variance sits: in the rows the row policy leaves out, and in
a few output coordinates of outsized variance (outlier features).

R²_lin = 1 - ΣSSE / ΣSST pools rows and coordinates, so whatever carries most of ΣSST decides
it. Both quantities here are computed from Gram statistics (``pillm.core.ridge.GramStats``);
neither needs the rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pillm.core.ridge import GramStats, heldout_sse


def _column_sst(stats: GramStats) -> Tensor:
    """Per output: Σ(y - ȳ)² around the rows' own mean."""
    return (stats.yty - stats.y_sum**2 / max(stats.n, 1)).clamp_min(0.0)


def spread_around(stats: GramStats, mean: Tensor) -> float:
    """Σ over rows and outputs of (y - mean)², from the statistics."""
    return float((stats.yty - 2 * mean * stats.y_sum + stats.n * mean**2).sum())


def excluded_share(kept: GramStats, excluded: GramStats) -> float:
    """Share of the held-out output variance of all rows (around the all-rows mean) that the
    excluded rows carry; 0 when none are excluded."""
    if excluded.n == 0:
        return 0.0
    both = kept.merge(excluded)
    mean = both.y_sum / both.n
    total = spread_around(both, mean)
    return spread_around(excluded, mean) / total if total > 0 else 0.0


def top_features(train: GramStats, k: int) -> Tensor:
    """Indices of the k output coordinates of largest variance on the fitting rows."""
    sst = _column_sst(train)
    return torch.topk(sst, min(k, sst.numel())).indices.sort().values


def outlier_stats(weight: Tensor, train: GramStats, held: GramStats, k: int) -> dict:
    """The k output coordinates of largest fitting-row variance (chosen on fitting rows, so the
    held-out numbers are not selected on themselves): their share of the held-out variance
    (``outlier_share``) and the held-out R² of the same fit over the other coordinates
    (``r2_no_outliers``; None when no coordinate is left)."""
    idx = top_features(train, k)
    sst, sse = _column_sst(held), heldout_sse(weight, held)
    total = float(sst.sum())
    rest = torch.ones_like(sst, dtype=torch.bool)
    rest[idx] = False
    rest_sst = float(sst[rest].sum())
    return {
        "outlier_share": float(sst[idx].sum()) / total if total > 0 else 0.0,
        "r2_no_outliers": 1 - float(sse[rest].sum()) / rest_sst if rest_sst > 0 else None,
        "outlier_features": ",".join(str(int(i)) for i in idx),
    }
