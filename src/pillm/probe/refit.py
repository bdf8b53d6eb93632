"""Bootstrap intervals of R²_lin that resample the fitting windows as well as the held-out ones,
refitting the map on every resample.

R²_lin depends on both row sets: on the fitting rows through the fitted map, on the held-out rows
through its score. A window of consecutive tokens, not a row, is the sampling unit (the rows of
one window are not independent). The Gram statistics are sums over rows, hence sums over windows:
with each window's partial statistics kept, a resample that takes window w c_w times is the sum
Σ_w c_w G_w. Each resample draws the fitting windows and the held-out windows with replacement,
independently; solves the map on its fitting statistics; and scores it on its held-out
statistics, R² = 1 - ΣSSE / ΣSST as ``pillm.core.ridge.r2_score_from_stats``.

Centring. A resample that repeats windows fits the map on fewer distinct rows (the weighted
fit's effective size is about half the sample's), so it overfits more and scores lower: with
p / n of a few per cent the resamples' median falls below the sample's R² by more than their
spread. The interval is therefore the resamples' 2.5 and 97.5 percentiles shifted by the
sample's R² minus their median. Their spread stays somewhat wider than the sampling spread of
R² (by about a tenth at p / n = 1.5 %, a third at 3 %, in simulations with known truth): the
interval errs on the wide side.

Solver. The point fit (``pillm.probe.fit``) is Cholesky, or for an exactly singular [X, 1]
(LayerNorm's sum constraint) the eigh pseudo-inverse, which drops the numerically null
directions. A resample is solved in the directions the point fit kept (all of [X, 1] after
Cholesky; the eigenvectors above the cut-off after eigh), by Cholesky there: the minimum-norm
solution wherever the resample shares the point fit's null space, as the LayerNorm constraint
makes it share. Rows are projected on those directions as they are accumulated, so a window's
statistics have the size of the basis. A resample whose Cholesky fails takes the same eigh
pseudo-inverse as the point fit.

Memory. One window's statistics of one block and row set take (q² + qk + 2k + 1) float64 for a
basis of q directions and k outputs. The windows of as many (block, row set) pairs as fit in
``GRAM_BYTES`` are accumulated in one pass over the batches (replayed from the first pass's
``Recording`` where it was kept); their intervals are computed and the statistics dropped before
the next pairs. Where one pair alone exceeds the budget, neighbouring windows are pooled into
units of several windows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from pillm.core.log import say
from pillm.core.ridge import GramStats, RidgeSolution
from pillm.probe.capture import Batch, _ids_of
from pillm.probe.intervals import recentred
from pillm.probe.masks import RowMask
from pillm.probe.passes import Recording, _captured

_F64 = torch.float64
GRAM_BYTES = 2**30  # per-window statistics held at a time (all pairs of one pass)
SOLVE_BYTES = 2**29  # resampled statistics and maps held at a time while solving


def basis(stats: GramStats, sol: RidgeSolution, rtol: float | None = None) -> Tensor | None:
    """The directions of [X, 1] the point fit ``sol`` solved in: None (all of them) after
    Cholesky; after eigh, the eigenvectors (p, q) of HᵀH + λI above its pseudo-inverse's cut-off
    (``rtol`` · the largest eigenvalue, default p · eps, as ``pillm.core.ridge``)."""
    if sol.solver == "cholesky":
        return None
    p = stats.hth.shape[0]
    a = (stats.hth + stats.hth.T) / 2 + sol.lam * torch.eye(p, dtype=_F64, device=stats.hth.device)
    ev, vec = torch.linalg.eigh(a)
    cut = (p * torch.finfo(_F64).eps if rtol is None else rtol) * ev.max().clamp_min(0.0)
    return vec[:, ev > cut]


@dataclass(frozen=True)
class RowSet:
    """One bootstrap of one block: its rows (``kept``: those the row policy keeps; else all)
    and its point fit's basis (None: all of [X, 1]) and ridge λ."""

    kept: bool
    basis: Tensor | None
    lam: float


@dataclass
class UnitStats:
    """Per unit u (a window, or a few neighbouring ones) the statistics of rows projected on a
    basis: hth (U, q, q), hty (U, q, k), yty and y_sum (U, k), n (U,); float64."""

    hth: Tensor
    hty: Tensor
    yty: Tensor
    y_sum: Tensor
    n: Tensor

    @classmethod
    def zeros(cls, units: int, q: int, k: int, device: torch.device | str) -> UnitStats:
        z = dict(dtype=_F64, device=device)
        return cls(torch.zeros(units, q, q, **z), torch.zeros(units, q, k, **z),
                   torch.zeros(units, k, **z), torch.zeros(units, k, **z),
                   torch.zeros(units, **z))  # fmt: skip

    @staticmethod
    def nbytes(q: int, k: int) -> int:
        """Bytes of one unit's statistics."""
        return 8 * (q * q + q * k + 2 * k + 1)

    def add(self, unit: Tensor, h: Tensor, y: Tensor) -> None:
        """Rows h (m, q), y (m, k) of the units ``unit`` (m,): each unit's rows summed by one
        matmul (deterministic on CUDA, unlike an index_add of products)."""
        ids, counts = torch.unique_consecutive(unit, return_counts=True)
        sizes = counts.tolist()
        for u, hs, ys in zip(ids.tolist(), h.split(sizes), y.split(sizes), strict=True):
            self.hth[u] += hs.T @ hs
            self.hty[u] += hs.T @ ys
            self.yty[u] += (ys * ys).sum(0)
            self.y_sum[u] += ys.sum(0)
            self.n[u] += ys.shape[0]

    def used(self) -> UnitStats:
        """The units that hold rows (itself when every unit does: no copy)."""
        m = self.n > 0
        if bool(m.all()):
            return self
        return UnitStats(self.hth[m], self.hty[m], self.yty[m], self.y_sum[m], self.n[m])

    def weighted(self, counts: Tensor) -> UnitStats:
        """The statistics of each resample (R rows of unit multiplicities ``counts`` (R, U))."""
        r, (u, q, k) = counts.shape[0], self.hty.shape
        hth = (counts @ self.hth.reshape(u, -1)).view(r, q, q)
        hth = torch.add(hth, hth.mT).mul_(0.5)  # (A + Aᵀ) / 2 with one temporary
        return UnitStats(hth, (counts @ self.hty.reshape(u, -1)).view(r, q, k),
                         counts @ self.yty, counts @ self.y_sum, counts @ self.n)  # fmt: skip


def _solve(a: Tensor, b: Tensor, lam: float) -> Tensor:
    """Batched (A + λI)⁻¹ B by Cholesky; a failed factorisation takes the eigh pseudo-inverse."""
    if lam:
        a = a + lam * torch.eye(a.shape[-1], dtype=_F64, device=a.device)
    chol, info = torch.linalg.cholesky_ex(a)
    x = torch.cholesky_solve(b, chol)
    bad = info != 0
    if bool(bad.any()):
        ev, vec = torch.linalg.eigh(a[bad])
        cut = a.shape[-1] * torch.finfo(_F64).eps * ev.amax(-1, keepdim=True).clamp_min(0.0)
        inv = torch.where(ev > cut, 1.0 / torch.where(ev > cut, ev, 1.0), 0.0)
        x[bad] = vec @ (inv.unsqueeze(-1) * (vec.mT @ b[bad]))
    return x


def resampled_r2(
    fit: UnitStats, held: UnitStats, lam: float, fit_counts: np.ndarray, held_counts: np.ndarray
) -> np.ndarray:
    """R² of each resample: the map solved on the fitting units weighted by ``fit_counts``
    (R, U_fit), scored on the held-out units weighted by ``held_counts`` (R, U_held); NaN where
    a resample's held-out rows have no variance."""
    q, k = fit.hty.shape[1:]
    step = max(1, SOLVE_BYTES // (8 * (2 * q * q + 4 * q * k)))
    dev = fit.hth.device
    out = []
    for s in range(0, len(fit_counts), step):
        f = fit.weighted(torch.as_tensor(fit_counts[s : s + step], dtype=_F64, device=dev))
        x = _solve(f.hth, f.hty, lam)  # (r, q, k)
        h = held.weighted(torch.as_tensor(held_counts[s : s + step], dtype=_F64, device=dev))
        # ||y - Hx||² = yᵀy - 2 xᵀHᵀy + xᵀHᵀH x per output, as pillm.core.ridge.heldout_sse
        sse = h.yty - 2 * (x * h.hty).sum(1) + (x * (h.hth @ x)).sum(1)
        sst = (h.yty - h.y_sum**2 / h.n.clamp_min(1.0)[:, None]).clamp_min(0.0).sum(1)
        r2 = 1 - sse.clamp_min(0.0).sum(1) / torch.where(sst > 0, sst, 1.0)
        out.append(torch.where(sst > 0, r2, torch.nan).cpu().numpy())
    return np.concatenate(out)


def counts(rng: np.random.Generator, units: int, resamples: int) -> np.ndarray:
    """(resamples, units) multiplicities of a bootstrap resample of the units."""
    idx = rng.integers(0, units, size=(resamples, units))
    out = np.zeros((resamples, units))
    np.add.at(out, (np.arange(resamples)[:, None], idx), 1.0)
    return out


def _windows(batches: Iterable[Batch], holdout_every: int) -> list[tuple[bool, int]]:
    """Per batch: (held out?, the number of windows before it on its side)."""
    out, seen = [], {False: 0, True: 0}
    for b, batch in enumerate(batches):
        held = (b + 1) % holdout_every == 0
        out.append((held, seen[held]))
        seen[held] += _ids_of(batch)[0].shape[0]
    out.append((False, seen[False]))  # the totals, last: (fitting windows, held-out windows)
    out.append((True, seen[True]))
    return out


def refit_intervals(
    model: nn.Module,
    batches: Sequence[Batch],
    sets: Mapping[int, Sequence[RowSet]],
    dims: Mapping[int, tuple[int, int]],
    device: torch.device | str,
    holdout_every: int,
    row_mask: RowMask | None,
    recording: Recording | None,
    resamples: int,
    seed: int = 0,
    budget: int = GRAM_BYTES,
) -> dict[int, list[dict]]:
    """Per block, per row set of ``sets`` (in its order): {lo, hi, fit_windows, heldout_windows},
    the 95 % bootstrap interval of held-out R² over fitting and held-out windows with the map
    refitted on each resample (percentiles recentred on the sample, as the module says), and
    the windows that hold rows of the set on each side.
    ``dims``: each block's (p, k) of [X, 1] -> Y. Every row set draws its resamples from
    ``seed``."""
    layout = _windows(batches, holdout_every)
    n_fit, n_held = layout[-2][1], layout[-1][1]
    pairs, group = [], {}
    for i, rsets in sets.items():
        p, k = dims[i]
        for j, rs in enumerate(rsets):
            q = p if rs.basis is None else rs.basis.shape[1]
            size = UnitStats.nbytes(q, k) * (n_fit + n_held)
            group[i, j] = math.ceil(size / budget)  # windows per unit
            pairs.append(((i, j), q, k, size / group[i, j]))
    out: dict[int, list[dict]] = {i: [{} for _ in rsets] for i, rsets in sets.items()}
    total, done = len(pairs), 0
    while pairs:
        chunk, used = [], 0.0
        while pairs and (not chunk or used + pairs[0][3] <= budget):
            chunk.append(pairs.pop(0))
            used += chunk[-1][3]
        stats = {
            key: tuple(
                UnitStats.zeros(math.ceil(n / group[key]), q, k, device) for n in (n_fit, n_held)
            )
            for key, q, k, _ in chunk
        }
        rows_in = {key: [torch.zeros(n, dtype=torch.long, device=device) for n in (n_fit, n_held)]
                   for key in stats}  # fmt: skip
        layers = sorted({i for (i, _), *_ in chunk})
        passes = _captured(model, batches, device, holdout_every, layers, row_mask, False,
                           recording)  # fmt: skip
        for b, (held, rows, keep, window) in enumerate(passes):
            offset = layout[b][1]
            for (i, j), (fit_st, held_st) in stats.items():
                x, y = rows[i]
                rs = sets[i][j]
                h = torch.cat([x, x.new_ones(x.shape[0], 1)], 1).to(device=device, dtype=_F64)
                y, w = y.to(device=device, dtype=_F64), window
                if rs.kept and row_mask is not None:
                    m = row_mask.rows(keep, y)
                    h, y, w = h[m], y[m], w[m]
                h = h if rs.basis is None else h @ rs.basis
                w = w + offset
                (held_st if held else fit_st).add(w // group[i, j], h, y)
                rows_in[i, j][held] += torch.bincount(w, minlength=len(rows_in[i, j][held]))
        for (i, j), (fit_st, held_st) in stats.items():
            f, h = fit_st.used(), held_st.used()
            lo = hi = None
            if len(f.n) >= 2 and len(h.n) >= 2 and resamples > 0:
                rng = np.random.default_rng(seed)
                fc, hc = counts(rng, len(f.n), resamples), counts(rng, len(h.n), resamples)
                # the sample itself (every unit once) first, then the resamples: one batch
                r2 = resampled_r2(f, h, sets[i][j].lam, np.vstack([np.ones(len(f.n)), fc]),
                                  np.vstack([np.ones(len(h.n)), hc]))  # fmt: skip
                lo, hi = recentred(r2[1:], float(r2[0]))
            fit_w, held_w = (int((c > 0).sum()) for c in rows_in[i, j])
            out[i][j] = {"lo": lo, "hi": hi, "fit_windows": fit_w, "heldout_windows": held_w}
            done += 1  # a line per refitted row set: on a CPU one takes up to a minute
            say(f"probe: intervals {done}/{total} (block {i}, row set {j})")
        del stats, rows_in
    return out
