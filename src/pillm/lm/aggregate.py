"""The LM study's summaries (the ``aggregate`` command): every run's records stacked into
``results/<name>/summary``.

- ``runs.parquet``: every metric row of every run (metrics and extras), plus per gradient-trained
  run ``train_loss_drop`` (the first step's training loss minus the final one) and ``trained``
  (1 when that drop is at least ``lm.trained_margin`` nats, else 0);
- ``lm.parquet``: mean/std/ci95/n over seeds per variant and metric (``pillm.paper.tidy``), with
  the runs expected, so a missing run shows;
- ``curves``, ``solves``, ``samples``: the runs' training curves, PIL solves and generation
  samples, stacked;
- ``claims/lm.parquet``: the per-seed values the claims are tested on (``pillm.paper``), the
  ``trained`` record of every gradient-trained arm among them (the claims' ``opponents:``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.tidy import read_runs, stack_parquet, summarise, write_parquet

TRAINED = "trained"  # the claim frame's metric for a gradient opponent (pillm.paper.claims)


def trained_rows(runs: pl.DataFrame, margin: float) -> pl.DataFrame:
    """Per run with a gradient phase (a ``train_loss_first`` record): ``train_loss_drop``, the
    first step's training loss minus the final one (``pillm.lm.train.loss_fall``), and
    ``trained``, 1.0 when the drop is at least ``margin`` nats (a NaN loss: 0.0). Each row keeps
    the run's identity and context columns."""
    first = runs.filter(pl.col("metric") == "train_loss_first")
    final = runs.filter(pl.col("metric") == "train_loss_final").select(
        "variant", "seed", pl.col("value").alias("final")
    )
    drop = (
        first.join(final, on=["variant", "seed"], how="left")
        .with_columns(metric=pl.lit("train_loss_drop"), value=pl.col("value") - pl.col("final"))
        .drop("final")
    )
    flag = drop.with_columns(
        metric=pl.lit(TRAINED),
        # polars orders NaN above every number: a NaN drop is not a fall
        value=((pl.col("value") >= margin) & pl.col("value").is_not_nan())
        .fill_null(False)
        .cast(pl.Float64),
    )
    return pl.concat([drop, flag]).select(runs.columns)


def aggregate(
    metrics_paths: list[str],
    curve_paths: list[str],
    solve_paths: list[str],
    sample_paths: list[str],
    variants: list[str],
    seeds: list[int],
    trained_margin: float,
    out_dir: str,
) -> None:
    out = Path(out_dir)
    runs = read_runs(metrics_paths)
    runs = pl.concat([runs, trained_rows(runs, trained_margin)], how="diagonal_relaxed")
    write_parquet(runs, out / "runs.parquet")
    write_parquet(stack_parquet(curve_paths), out / "curves.parquet")
    write_parquet(stack_parquet(solve_paths), out / "solves.parquet")
    write_parquet(read_runs(sample_paths), out / "samples.parquet")
    write_parquet(summarise(runs, {"variant": variants}, seeds), out / "lm.parquet")
    seed_rows = runs.select(pl.col("variant").alias("arm"), "seed", "metric", "value")
    write_claim_frame(out / "claims" / "lm.parquet", seed_rows.iter_rows(named=True))
