"""How linear is each FFN block? Closed-form linear (and rank-r bilinear) probes of FFN maps.

Contract. Each FFN block is treated as a position-wise map X (rows, d_in) -> Y (rows, d_out),
X being the block's FFN input and Y its output before any dropout, residual add or norm
(``pillm.probe.capture``). Rows are streamed into float64 Gram statistics
(``pillm.core.ridge.GramStats``) of [X, 1] -> Y, so memory is O(d²) whatever the number of
tokens. Every ``holdout_every``-th batch is held out; ``r2_lin`` is the held-out R² of the exact
least-squares map fitted on the other batches (minimum-norm when [X, 1] is rank-deficient; an
optional ridge is recorded). A second pass fits [X, 1, products of the top-r principal
components] the same way: ``r2_bilinear``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from pillm.core.log import say
from pillm.core.ridge import (
    GramStats,
    RidgeFallbackWarning,
    RidgeSolution,
    r2_score_from_stats,
    solve_ridge,
)
from pillm.probe.capture import Batch, ffn_modules
from pillm.probe.masks import RowMask
from pillm.probe.passes import REPLAY_BYTES, Recording, _captured
from pillm.probe.refit import RowSet, basis, refit_intervals
from pillm.probe.variance import excluded_share, outlier_stats

_F64 = torch.float64


def _with_ones(x: Tensor) -> Tensor:
    return torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)


@dataclass
class BlockStats:
    """One block's Gram statistics of fitting (``train``) and held-out rows: the rows the row
    policy keeps and, when asked for, those it leaves out (None otherwise) and, of those, the
    rows only its massive-activation rule leaves out (``*_massive``)."""

    train: GramStats
    held: GramStats
    train_excluded: GramStats | None = None
    held_excluded: GramStats | None = None
    train_massive: GramStats | None = None
    held_massive: GramStats | None = None

    def __iter__(self) -> Iterator[GramStats]:  # ``tr, va = stats[i]``: the kept rows
        return iter((self.train, self.held))

    def all_rows(self) -> tuple[GramStats, GramStats]:
        """(fitting, held-out) statistics of every row, kept or not."""
        if self.train_excluded is None or self.held_excluded is None:
            return self.train, self.held
        return self.train.merge(self.train_excluded), self.held.merge(self.held_excluded)

    def with_massive(self) -> tuple[GramStats, GramStats] | None:
        """(fitting, held-out) statistics of the rows the policy keeps without its
        massive-activation rule; None when that rule is off or was not accumulated."""
        if self.train_massive is None or self.held_massive is None:
            return None
        return self.train.merge(self.train_massive), self.held.merge(self.held_massive)


def accumulate_ffn_stats(
    model: nn.Module,
    batches: Iterable[Batch],
    device: torch.device | str = "cpu",
    holdout_every: int = 5,
    layers: Sequence[int] | None = None,
    featurize: Callable[[int, Tensor], Tensor] | None = None,
    row_mask: RowMask | None = None,
    excluded: bool = False,
    recording: Recording | None = None,
) -> dict[int, BlockStats]:
    """One pass: {layer: BlockStats} of featurize(layer, X) -> Y.

    Default features [X, 1]; X arrives float64 on ``device``. Batch b is held out when
    (b + 1) % holdout_every == 0. ``row_mask`` (``pillm.probe.masks``) picks the rows of the
    fit; with ``excluded`` the rows it leaves out are accumulated beside them, and those of them
    only its massive-activation rule leaves out once more. Memory: one batch of rows plus
    O(p² + pk) per layer and row set (and what ``recording`` keeps, ``_captured``).
    """
    massive = excluded and row_mask is not None and row_mask.massive > 0
    featurize = featurize or (lambda _i, x: _with_ones(x))
    stats: dict[int, BlockStats] = {}
    passes = _captured(model, batches, device, holdout_every, layers, row_mask, False, recording)
    for held, rows, keep, _ in passes:
        for i, (x, y) in rows.items():
            h = featurize(i, x.to(device=device, dtype=_F64))
            if i not in stats:
                p, k = h.shape[1], y.shape[1]
                sets = 2 + 2 * excluded + 2 * massive
                stats[i] = BlockStats(*[GramStats.zeros(p, k, device) for _ in range(sets)])
            s = stats[i]
            if row_mask is None:
                (s.held if held else s.train).update(h, y)  # rows die here: only sums survive
                continue
            k = row_mask.rows(keep, y)  # by token, then this block's massive-activation rows
            (s.held if held else s.train).update(h[k], y[k])
            if excluded:
                out = s.held_excluded if held else s.train_excluded
                out.update(h[~k], y[~k])  # type: ignore[union-attr]
            if massive:
                m = row_mask.massive_only(keep, y)
                out = s.held_massive if held else s.train_massive
                out.update(h[m], y[m])  # type: ignore[union-attr]
    for i, s in stats.items():
        if s.train.n == 0 or s.held.n == 0:
            raise ValueError(
                f"layer {i}: {s.train.n} train / {s.held.n} held-out rows; need both > 0"
                + ("" if row_mask is None else " (probe.rows leaves too few rows: relax it)")
            )
    return stats


def _solve(stats: GramStats, ridge: float, rtol: float | None) -> RidgeSolution:
    # LayerNorm outputs obey Σ_j (x_j - β_j) / γ_j = 0, so [X, 1] is exactly singular for
    # LN-fed FFNs and the fit takes ridge.py's eigh pseudo-inverse (expected, hence silenced;
    # solver and kappa are reported). That drops the null direction; a tiny ridge would not,
    # it would put rounding noise / λ into W along it (harmless for R², not for effective rank).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeFallbackWarning)
        return solve_ridge(stats, lam=ridge * float(stats.hth.diagonal().mean()), rtol=rtol)


def _entropy_rank(s: Tensor) -> float:
    p = s[s > 0] / s.sum()
    return float(torch.exp(-(p * p.log()).sum())) if p.numel() else 0.0


def effective_rank(w: Tensor) -> float:
    """exp(entropy of the singular values normalised to sum 1); 0 for a zero matrix.

    Of a least-squares map W ≈ Σ_x⁻¹ Cov(x, y) this mostly measures the conditioning of its
    input: a few input directions of tiny variance get huge weights and dominate the spectrum
    (the tables call it input conditioning); ``map_rank`` is the rank of the map itself."""
    return _entropy_rank(torch.linalg.svdvals(w.to(_F64)))


def map_rank(w: Tensor, train: GramStats) -> float:
    """The effective rank (as ``effective_rank``) of the map after whitening its input: of
    Σ_x^½ W, Σ_x the input covariance of the fitting rows ``train`` and ``w`` (d_in, d_out)
    the linear part. Its singular values are the square roots of the eigenvalues of WᵀΣ_xW,
    the covariance of the fitted outputs: the output directions the map's predictions spread
    over, weighted by how much they carry, whatever the input's conditioning."""
    d = w.shape[0]
    mu = train.h_sum[:d] / train.n
    cov = train.hth[:d, :d] / train.n - torch.outer(mu, mu)
    w = w.to(device=cov.device, dtype=_F64)
    out_cov = w.T @ ((cov + cov.T) / 2) @ w
    ev = torch.linalg.eigvalsh((out_cov + out_cov.T) / 2).clamp_min(0.0)
    return _entropy_rank(ev.sqrt())


def _massive_count(st: BlockStats) -> int:
    """Rows (fitting + held-out) only the massive-activation rule leaves out."""
    both = (st.train_massive, st.held_massive)
    return sum(s.n for s in both if s is not None)


def _r2_with_massive(st: BlockStats, ridge: float, rtol: float | None, r2: float) -> float:
    """Held-out R² of the fit on the rows the policy keeps without its massive-activation rule
    (``r2``, the kept rows' value, when the rule is off)."""
    both = st.with_massive()
    if both is None or both[0].n == st.train.n and both[1].n == st.held.n:
        return r2
    return r2_score_from_stats(_solve(both[0], ridge, rtol).weight, both[1])[0]


def _bilinear_basis(tr: GramStats, d: int, rank: int) -> tuple[Tensor, Tensor]:
    """(mean (d,), whitened top-``rank`` principal directions (d, rank)) from train stats."""
    mu = tr.h_sum[:d] / tr.n
    cov = tr.hth[:d, :d] / tr.n - torch.outer(mu, mu)
    ev, vec = torch.linalg.eigh((cov + cov.T) / 2)
    ev, vec = ev.flip(0)[:rank], vec.flip(1)[:, :rank]
    # Numerically null directions (LayerNorm's sum constraint, rank > true rank) carry only
    # rounding noise: drop them rather than amplify it. Whitening the rest puts z_i z_j on the
    # scale of X's features whatever the spectrum, so one scalar ridge suits all features.
    keep = ev > float(ev[0]) * 1e-10
    return mu, vec[:, keep] / ev[keep].sqrt()


def probe_model(
    model: nn.Module,
    batches: Iterable[Batch],
    device: torch.device | str = "cpu",
    holdout_every: int = 5,
    rank: int = 16,
    *,
    layers: Sequence[int] | None = None,
    ridge: float = 0.0,
    rtol: float | None = None,
    row_mask: RowMask | None = None,
    outlier_k: int = 0,
    resamples: int = 0,
    seed: int = 0,
    replay_bytes: int = REPLAY_BYTES,
) -> list[dict]:
    """Per probed block, a dict of linear-recoverability metrics and the fitted map ``W``.

    ``batches``: input_ids (B, T), (input_ids, attention_mask) or {"input_ids", "attention_mask"}
    (moved to ``device``, where the model must live); read more than once when ``rank`` > 0 or
    ``resamples`` > 0, so pass a re-iterable (list, DataLoader). Those later passes replay the
    first pass's captured rows while they fit in ``replay_bytes`` (``Recording``: the same
    values, without running the model again). Run the model in float32: the
    eigh cutoff ``rtol`` (ridge.py default p·eps) cannot drop the LN null direction of
    half-precision rows.

    Rows: every fit and score uses the rows ``row_mask`` keeps (``pillm.probe.masks``; None:
    all); beside it the same map is fitted and scored on all rows (``*_all`` keys) and on the
    rows the policy keeps without its massive-activation rule (``r2_lin_with_massive``; r2_lin
    when the rule is off). Keys: layer, name, r2_lin, r2_lin_all, r2_lin_with_massive,
    r2_feature_median, effective_rank (of W's d_in x d_out linear part: mostly the input's
    conditioning), map_rank (of the map after whitening its input, ``map_rank``), n_train_rows,
    n_heldout_rows (kept rows), n_excluded_rows (fitting + held-out rows left out),
    n_massive_rows (of those, the rows only the massive-activation rule leaves out),
    excluded_share (of the all-rows held-out output variance, carried by the rows
    left out), d_in, d_out, lam, ridge (lam / mean diag of HᵀH), solver, kappa, W ((d_in + 1,
    d_out) float64 CPU, last row = bias), W_all, heldout (the held-out ``GramStats`` of [X, 1]
    -> Y, to score any other linear map on the same rows); with ``outlier_k`` > 0 (None else)
    outlier_k, outlier_share, r2_no_outliers, outlier_features and their ``_all`` twins
    (``pillm.probe.variance``); with ``resamples`` > 0 (None else) r2_lin_lo, r2_lin_hi,
    r2_lin_all_lo, r2_lin_all_hi, the 95 % percentile bootstrap over fitting and held-out
    windows with the map refitted on each resample (``pillm.probe.refit``; ``seed``), and
    n_fit_windows, n_heldout_windows (windows with kept rows); and, None when rank = 0,
    r2_bilinear, bilinear_gain (over r2_lin),
    bilinear_rank (capped at the numerically nonzero principal directions), bilinear_features,
    bilinear_solver, all on the kept rows.
    """
    if (rank > 0 or resamples > 0) and isinstance(batches, Iterator):
        raise TypeError("rank or resamples > 0 need two passes over batches: pass a list")
    names = [n for n, _ in ffn_modules(model)]
    masked = row_mask is not None
    # the later passes (scores, bilinear fit) replay the first pass's rows where they fit
    recording = Recording(replay_bytes) if rank > 0 or resamples > 0 else None
    lin = accumulate_ffn_stats(
        model, batches, device, holdout_every, layers, None, row_mask, masked, recording
    )
    out: list[dict] = []
    sets: dict[int, list[RowSet]] = {}  # the refit bootstrap's row sets and shapes per block
    dims: dict[int, tuple[int, int]] = {}
    none = dict.fromkeys(["outlier_k", "outlier_share", "r2_no_outliers", "outlier_features",
                          "outlier_share_all", "r2_no_outliers_all", "outlier_features_all",
                          "r2_lin_lo", "r2_lin_hi", "r2_lin_all_lo", "r2_lin_all_hi",
                          "n_fit_windows", "n_heldout_windows", "r2_bilinear", "bilinear_gain",
                          "bilinear_rank",
                          "bilinear_features", "bilinear_solver"])  # fmt: skip
    for i, st in lin.items():
        tr, va = st.train, st.held
        d_in, d_out = tr.hty.shape[0] - 1, tr.hty.shape[1]
        sol = _solve(tr, ridge, rtol)
        r2, r2_per = r2_score_from_stats(sol.weight, va)
        tr_all, va_all = st.all_rows()
        sol_all = _solve(tr_all, ridge, rtol) if masked else sol
        if resamples > 0:
            sets[i] = [RowSet(True, basis(tr, sol, rtol), sol.lam)]
            sets[i] += [RowSet(False, basis(tr_all, sol_all, rtol), sol_all.lam)] if masked else []
            dims[i] = (d_in + 1, d_out)
        rec = dict(
            layer=i, name=names[i], r2_lin=r2,
            r2_lin_all=r2_score_from_stats(sol_all.weight, va_all)[0] if masked else r2,
            r2_lin_with_massive=_r2_with_massive(st, ridge, rtol, r2),
            r2_feature_median=float(torch.quantile(r2_per, 0.5)),
            effective_rank=effective_rank(sol.weight[:d_in]),
            map_rank=map_rank(sol.weight[:d_in], tr),
            n_train_rows=tr.n, n_heldout_rows=va.n, n_excluded_rows=tr_all.n + va_all.n - tr.n - va.n,
            n_massive_rows=_massive_count(st),
            excluded_share=excluded_share(va, st.held_excluded) if masked else 0.0,  # type: ignore[arg-type]
            d_in=d_in, d_out=d_out, lam=sol.lam, ridge=ridge, solver=sol.solver, kappa=sol.kappa,
            W=sol.weight.cpu(), W_all=sol_all.weight.cpu(), heldout=va, **none,
        )  # fmt: skip
        if outlier_k > 0:
            rec.update(outlier_k=outlier_k, **outlier_stats(sol.weight, tr, va, outlier_k))
            extra = outlier_stats(sol_all.weight, tr_all, va_all, outlier_k)
            rec.update({f"{k}_all": v for k, v in extra.items()})
        out.append(rec)
    if resamples > 0:
        say(f"probe: R²_lin intervals, {len(sets)} blocks refitted {resamples} times")
        boot = refit_intervals(model, batches, sets, dims, device, holdout_every, row_mask,
                               recording, resamples, seed)  # type: ignore[arg-type]  # fmt: skip
        for rec in out:
            kept, every = (boot[rec["layer"]] * 2)[:2]  # without a policy: all rows = kept
            rec.update(r2_lin_lo=kept["lo"], r2_lin_hi=kept["hi"], r2_lin_all_lo=every["lo"],
                       r2_lin_all_hi=every["hi"], n_fit_windows=kept["fit_windows"],
                       n_heldout_windows=kept["heldout_windows"])  # fmt: skip
    if rank > 0:
        say(f"probe: bilinear probe of rank {rank}")
        bases = {
            i: _bilinear_basis(st.train, st.train.hty.shape[0] - 1, rank) for i, st in lin.items()
        }

        def quad(i: int, x: Tensor) -> Tensor:
            mu, proj = bases[i]
            z = (x - mu) @ proj
            iu = torch.triu_indices(z.shape[1], z.shape[1], device=z.device)
            return torch.cat([_with_ones(x), z[:, iu[0]] * z[:, iu[1]]], dim=1)

        bil = accumulate_ffn_stats(
            model, batches, device, holdout_every, layers, quad, row_mask, recording=recording
        )
        for rec in out:
            tr, va = bil[rec["layer"]]
            sol = _solve(tr, ridge, rtol)
            r2b, r = r2_score_from_stats(sol.weight, va)[0], bases[rec["layer"]][1].shape[1]
            rec.update(r2_bilinear=r2b, bilinear_gain=r2b - rec["r2_lin"], bilinear_rank=r)
            rec.update(bilinear_features=tr.hth.shape[0], bilinear_solver=sol.solver)
    return out
