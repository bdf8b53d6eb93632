"""Correlations between per-block probe quantities, always within one model group.

Models differ in scale (perplexity, depth, width), so a correlation over the blocks of several
models mixes a between-model contrast with the within-model one and can have the opposite sign
of every within-model correlation (Simpson's paradox). Every correlation here takes the blocks
of one group on one corpus; for a group of several seeds (pillm) it is computed within each seed
and averaged over seeds, with a hierarchical bootstrap over seeds, then blocks
(``pillm.probe.intervals``), never pooling the seeds' blocks as independent ones.

Too few blocks. A rank correlation over a handful of blocks, and a bootstrap that redraws them,
say little: where a model has fewer than ``probe.min_blocks`` blocks (per seed), or the interval
is undefined or as wide as a correlation's whole range [-1, 1], the estimate is "too few
blocks" (``too_few``) and is reported as such instead of a direction.

The swap claim: does R²_lin on the rows the policy keeps rank the blocks by the cost of swapping
them for their linear fit better than R²_lin on all rows? Its statistic is the paired
difference ρ(R²_lin, Δ) - ρ(R²_lin all rows, Δ) of Spearman correlations on the same resample
of blocks; lower is better (a block that is more linear should cost less to replace). The claim
is not evaluated (``claim_interval_rows`` writes a guard row in place of its interval row) where
any of the three estimates has too few blocks, or where both correlations are indistinguishable
from zero: a difference of two correlations that are each compatible with no relation at all
ranks nothing.
"""

from __future__ import annotations

import polars as pl

from pillm.paper.verdicts import BOTH_NULL_METRIC, TOO_FEW_METRIC
from pillm.probe.intervals import (
    Estimate,
    Statistic,
    bootstrap_blocks,
    linear_corr,
    rank_corr,
    rank_corr_diff,
)
from pillm.probe.summary import group_key

SWAP_METRIC = "swap_rho"  # the claim frame's metric: ρ(R²_lin, swap cost)
BOOT_SEED = 0
CORR_RANGE = 2.0  # the width of a correlation's range [-1, 1]
MIN_BLOCKS = 10  # probe.min_blocks where the params do not say
# Guard rows of the claim frame: the metric names why the claim is not evaluated; value, lo,
# hi and n are the difference's (pillm.paper.claims reads them as the verdict and its evidence).
TOO_FEW = TOO_FEW_METRIC
BOTH_NULL = BOTH_NULL_METRIC


def blocks_of(probe: pl.DataFrame, group: str, corpus: str | None) -> pl.DataFrame:
    """Rows (every seed's blocks) of one group on one corpus."""
    return probe.filter((pl.col("model_group") == group) & pl.col("corpus").eq_missing(corpus))


def _cols(df: pl.DataFrame, names: list[str]) -> dict[str, list]:
    return {n: (df[n].to_list() if n in df.columns else [None] * df.height) for n in names}


def _boot(df: pl.DataFrame, cols: dict[str, list], stat: Statistic, resamples: int) -> Estimate:
    """``stat`` over the blocks of ``df`` (one group, one corpus), within each model (seed)."""
    return bootstrap_blocks(cols, stat, resamples, BOOT_SEED, seeds=df["model"].to_list())


def swap_rho(df: pl.DataFrame, resamples: int, all_rows: bool = False) -> Estimate:
    """Spearman ρ between R²_lin (kept rows, or all rows) and the linear swap's Δ, with its
    bootstrap interval over the blocks of ``df`` (one group, one corpus)."""
    x = "r2_lin_all" if all_rows else "r2_lin"
    return _boot(df, _cols(df, [x, "delta_linear"]), rank_corr(x, "delta_linear"), resamples)


def swap_rho_diff(df: pl.DataFrame, resamples: int) -> Estimate:
    """ρ(R²_lin, Δ) - ρ(R²_lin all rows, Δ), paired over resampled blocks."""
    cols = _cols(df, ["r2_lin", "r2_lin_all", "delta_linear"])
    return _boot(df, cols, rank_corr_diff("r2_lin", "r2_lin_all", "delta_linear"), resamples)


def bilinear_r(df: pl.DataFrame, resamples: int) -> Estimate:
    """Pearson r between 1 - R²_lin and the bilinear gain over the blocks of ``df``."""
    cols = _cols(df, ["r2_lin", "bilinear_gain"])
    cols["resid"] = [None if v is None else 1 - v for v in cols.pop("r2_lin")]
    return _boot(df, cols, linear_corr("resid", "bilinear_gain"), resamples)


def rank_r(df: pl.DataFrame, resamples: int, column: str = "map_rank") -> Estimate:
    """Spearman ρ between R²_lin and a rank of the fit over the blocks of ``df``: ``map_rank``
    (of the map after whitening its input) or ``effective_rank`` (input conditioning)."""
    return _boot(df, _cols(df, ["r2_lin", column]), rank_corr("r2_lin", column), resamples)


def too_few(est: Estimate, min_blocks: int) -> bool:
    """Too few blocks for a direction: fewer than ``min_blocks`` per model (seed), no interval,
    or an interval as wide as a correlation's range."""
    if est.lo is None or est.hi is None:
        return True
    return est.per_seed < min_blocks or est.hi - est.lo >= CORR_RANGE


def excludes_zero(est: Estimate) -> bool:
    return est.lo is not None and est.hi is not None and (est.lo > 0 or est.hi < 0)


def guard(diff: Estimate, kept: Estimate, every: Estimate, min_blocks: int) -> str | None:
    """Why a claim on the difference ``diff`` of the correlations ``kept`` and ``every`` is not
    evaluated, or None: ``TOO_FEW`` where any of the three has too few blocks, ``BOTH_NULL``
    where both correlations' intervals contain zero."""
    if any(too_few(e, min_blocks) for e in (diff, kept, every)):
        return TOO_FEW
    if not (excludes_zero(kept) or excludes_zero(every)):
        return BOTH_NULL
    return None


def swap_guard(df: pl.DataFrame, resamples: int, min_blocks: int) -> tuple[str | None, Estimate]:
    """(``guard`` of the swap claim of ``df``, its difference estimate)."""
    diff = swap_rho_diff(df, resamples)
    kept, every = swap_rho(df, resamples), swap_rho(df, resamples, all_rows=True)
    return guard(diff, kept, every, min_blocks), diff


def arms(group: str) -> tuple[str, str]:
    """The claim arms of one group: R²_lin on the kept rows, and on all rows."""
    key = group_key(group)
    return f"{key}_masked", f"{key}_all"


def claim_interval_rows(
    probe: pl.DataFrame, corpus: str | None, resamples: int, min_blocks: int = MIN_BLOCKS
) -> list[dict]:
    """Rows of the claim frame (``pillm.paper.claim_frame``): per group with swaps on
    ``corpus``, the paired difference of the two swap correlations and its interval, under the
    metric ``swap_rho`` where the claim is evaluated and under ``TOO_FEW`` or ``BOTH_NULL``
    (``swap_guard``) where it is not."""
    rows = []
    for group in sorted(set(probe["model_group"].to_list())):
        df = blocks_of(probe, group, corpus).filter(pl.col("delta_linear").is_not_null())
        if df.height == 0:
            continue
        guard, est = swap_guard(df, resamples, min_blocks)
        if est.value is None:
            continue
        a, b = arms(group)
        how = f"bootstrap over blocks ({resamples} resamples)"
        if est.seeds > 1:
            how = (f"mean over {est.seeds} seeds of the within-seed value, hierarchical bootstrap "
                   f"over seeds, then blocks ({resamples} resamples)")  # fmt: skip
        if guard == TOO_FEW:
            how += f"; probe.min_blocks = {min_blocks}"
        nan = float("nan")
        rows.append({"a": a, "b": b, "metric": guard or SWAP_METRIC, "diff": est.value,
                     "lo": nan if est.lo is None else est.lo,
                     "hi": nan if est.hi is None else est.hi, "n": est.per_seed,
                     "method": how})  # fmt: skip
    return rows
