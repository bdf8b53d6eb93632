"""Correlations between per-block probe quantities, always within one model group.

Models differ in scale (perplexity, depth, width), so a correlation over the blocks of several
models mixes a between-model contrast with the within-model one and can have the opposite sign
of every within-model correlation (Simpson's paradox). Every correlation here takes the blocks
of one group on one corpus (the pillm group: every seed's blocks, one unit each) with a
percentile-bootstrap interval over those blocks (``pillm.probe.intervals``).

The swap claim: does R²_lin on the rows the policy keeps rank the blocks by the cost of swapping
them for their linear fit better than R²_lin on all rows? Its statistic is the paired
difference ρ(R²_lin, Δ) - ρ(R²_lin all rows, Δ) of Spearman correlations on the same resample
of blocks; lower is better (a block that is more linear should cost less to replace).
"""

from __future__ import annotations

import polars as pl

from pillm.probe.intervals import (
    Estimate,
    bootstrap_blocks,
    linear_corr,
    rank_corr,
    rank_corr_diff,
)
from pillm.probe.summary import group_key

SWAP_METRIC = "swap_rho"  # the claim frame's metric: ρ(R²_lin, swap cost)
BOOT_SEED = 0


def blocks_of(probe: pl.DataFrame, group: str, corpus: str | None) -> pl.DataFrame:
    """Rows (every seed's blocks) of one group on one corpus."""
    return probe.filter((pl.col("model_group") == group) & pl.col("corpus").eq_missing(corpus))


def _cols(df: pl.DataFrame, names: list[str]) -> dict[str, list]:
    return {n: (df[n].to_list() if n in df.columns else [None] * df.height) for n in names}


def swap_rho(df: pl.DataFrame, resamples: int, all_rows: bool = False) -> Estimate:
    """Spearman ρ between R²_lin (kept rows, or all rows) and the linear swap's Δ, with its
    bootstrap interval over the blocks of ``df`` (one group, one corpus)."""
    x = "r2_lin_all" if all_rows else "r2_lin"
    return bootstrap_blocks(_cols(df, [x, "delta_linear"]), rank_corr(x, "delta_linear"),
                            resamples, BOOT_SEED)  # fmt: skip


def swap_rho_diff(df: pl.DataFrame, resamples: int) -> Estimate:
    """ρ(R²_lin, Δ) - ρ(R²_lin all rows, Δ), paired over resampled blocks."""
    cols = _cols(df, ["r2_lin", "r2_lin_all", "delta_linear"])
    stat = rank_corr_diff("r2_lin", "r2_lin_all", "delta_linear")
    return bootstrap_blocks(cols, stat, resamples, BOOT_SEED)


def bilinear_r(df: pl.DataFrame, resamples: int) -> Estimate:
    """Pearson r between 1 - R²_lin and the bilinear gain over the blocks of ``df``."""
    cols = _cols(df, ["r2_lin", "bilinear_gain"])
    cols["resid"] = [None if v is None else 1 - v for v in cols.pop("r2_lin")]
    return bootstrap_blocks(cols, linear_corr("resid", "bilinear_gain"), resamples, BOOT_SEED)


def rank_r(df: pl.DataFrame, resamples: int) -> Estimate:
    """Spearman ρ between R²_lin and the effective rank of the fit over the blocks of ``df``."""
    cols = _cols(df, ["r2_lin", "effective_rank"])
    return bootstrap_blocks(cols, rank_corr("r2_lin", "effective_rank"), resamples, BOOT_SEED)


def arms(group: str) -> tuple[str, str]:
    """The claim arms of one group: R²_lin on the kept rows, and on all rows."""
    key = group_key(group)
    return f"{key}_masked", f"{key}_all"


def claim_interval_rows(probe: pl.DataFrame, corpus: str | None, resamples: int) -> list[dict]:
    """Interval rows of the claim frame (``pillm.paper.claim_frame``): per group with swaps on
    ``corpus``, the paired difference of the two swap correlations and its interval."""
    rows = []
    for group in sorted(set(probe["model_group"].to_list())):
        df = blocks_of(probe, group, corpus).filter(pl.col("delta_linear").is_not_null())
        est = swap_rho_diff(df, resamples)
        if est.value is None or est.lo is None:
            continue
        a, b = arms(group)
        rows.append({"a": a, "b": b, "metric": SWAP_METRIC, "diff": est.value, "lo": est.lo,
                     "hi": est.hi, "n": est.n,
                     "method": f"bootstrap over blocks ({resamples} resamples)"})  # fmt: skip
    return rows
