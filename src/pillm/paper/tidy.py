"""Tidy aggregation shared by every study: one polars chain from run records to summaries.

``summarise`` gives mean, std and n over seeds per (variant, metric) with the expected seed
count, so a missing seed shows up as ``n < n_expected`` instead of silently vanishing; every
summary is written atomically. Each study's report aggregates its own runs through these.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.core.records import IDENTITY, atomic_path

GROUP = ["experiment", "variant", "corpus", "tokenizer", "data_policy", "metric"]


def summarise(runs: pl.DataFrame, variants: list[str], seeds: list[int]) -> pl.DataFrame:
    """Mean/std/n over seeds per (variant, metric); the expected grid is a cross join."""
    expected = pl.DataFrame({"variant": variants}).join(
        pl.DataFrame({"seed": seeds}, schema={"seed": pl.Int64}), how="cross"
    )
    present = runs.select("variant", pl.col("seed").cast(pl.Int64)).unique()
    missing = expected.join(present, on=["variant", "seed"], how="anti")
    summary = (
        runs.lazy()
        .group_by(GROUP)  # one group per variant x metric; seeds are the replicates
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("std"),  # sample std (ddof=1); null for n = 1
            pl.col("value").count().alias("n"),
            pl.col("seed").sort().alias("seeds"),
        )
        .with_columns(pl.lit(len(seeds)).alias("n_expected"))
        .sort(["experiment", "variant", "metric"])
        .collect()
    )
    if missing.height:
        print(f"warning: missing runs (variant, seed): {missing.rows()}")
    return summary


def write_parquet(df: pl.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        df.write_parquet(tmp)


def stack_parquet(paths: list[str]) -> pl.DataFrame:
    """All runs' per-run tables in one frame (rows of all-null placeholders dropped)."""
    df = pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")
    data_cols = [c for c in df.columns if c not in IDENTITY]
    return df.filter(~pl.all_horizontal(pl.col(data_cols).is_null()))
