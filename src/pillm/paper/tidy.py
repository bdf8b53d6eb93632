"""Tidy aggregation shared by every study: one polars chain from run records to summaries.

``read_runs`` stacks the tidy metric records of many runs, ``pivot_records`` turns them into one
row per job with a column per metric, ``concat_parquet``/``stack_parquet`` stack per-run tables,
``summarise`` gives mean, std, n and the 95 % t-interval half-width (``ci95``) over seeds per cell of the expected grid with the expected
seed count, so a missing seed shows up as ``n < n_expected`` instead of silently vanishing, and
``write_parquet`` writes a summary atomically. Each study's ``aggregate_*`` is a chain of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl
from scipy import stats

from pillm.core.records import IDENTITY, atomic_path, read_records

GROUP = ["experiment", "variant", "corpus", "tokenizer", "data_policy", "metric"]


def ci95(std: float | None, n: int) -> float | None:
    """Half-width of the two-sided 95 % t interval of a mean of ``n`` values with sample std
    ``std``: t(0.975, n-1) std / sqrt(n); None for n < 2 (no interval: report the mean alone)."""
    if std is None or n < 2 or std != std:
        return None
    return float(stats.t.ppf(0.975, n - 1)) * std / n**0.5


def summarise(
    runs: pl.DataFrame,
    grid: Mapping[str, list[str]],
    seeds: list[int],
    group: list[str] = GROUP,
    what: str = "runs (variant, seed)",
) -> pl.DataFrame:
    """Mean/std/n/ci95 over seeds per ``group`` (which holds the ``grid`` keys and ``metric``), sorted
    by experiment (where grouped on), the grid keys and metric. The expected runs are the cross
    join of the grid's values and ``seeds``; missing ones are printed as 'missing <what>'."""
    expected = pl.DataFrame({"seed": seeds}, schema={"seed": pl.Int64})
    for key, values in reversed(grid.items()):
        expected = pl.DataFrame({key: values}).join(expected, how="cross")
    keys = [*grid, "seed"]
    present = runs.select(*grid, pl.col("seed").cast(pl.Int64)).unique()
    missing = expected.select(keys).join(present, on=keys, how="anti")
    summary = (
        runs.lazy()
        .group_by(group)  # one group per grid cell x metric; seeds are the replicates
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("std"),  # sample std (ddof=1); null for n = 1
            pl.col("value").count().alias("n"),
            pl.col("seed").sort().alias("seeds"),
        )
        .with_columns(pl.lit(len(seeds)).alias("n_expected"))
        .sort([c for c in ("experiment",) if c in group] + [*grid, "metric"])
        .collect()
    )
    half = [ci95(s, n) for s, n in zip(summary["std"], summary["n"], strict=True)]
    summary = summary.with_columns(pl.Series("ci95", half, dtype=pl.Float64))
    if missing.height:
        print(f"warning: missing {what}: {missing.rows()}")
    return summary


def read_runs(paths: list[str]) -> pl.DataFrame:
    """Every run's tidy metric records (``metrics.json``) in one frame, one row per metric."""
    return pl.DataFrame(read_records(paths), infer_schema_length=None)


def pivot_records(paths: list[str], index: list[str]) -> pl.DataFrame:
    """One row per job (the ``index`` columns) with a column per metric."""
    return read_runs(paths).pivot(on="metric", index=index, values="value")


def write_parquet(df: pl.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        df.write_parquet(tmp)


def concat_parquet(paths: list[str]) -> pl.DataFrame:
    """All runs' per-run tables in one frame, columns unified (absent ones null)."""
    return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")


def stack_parquet(paths: list[str]) -> pl.DataFrame:
    """``concat_parquet`` less the rows of all-null placeholders (a run with nothing to add)."""
    df = concat_parquet(paths)
    data_cols = [c for c in df.columns if c not in IDENTITY]
    return df.filter(~pl.all_horizontal(pl.col(data_cols).is_null()))


def loss_share(unigram: float, arm_loss: float, full_loss: float) -> float:
    """(L_uni - L_arm) / (L_uni - L_full): the arm's part of the full model's gain over unigram."""
    return (unigram - arm_loss) / (unigram - full_loss)
