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
from pillm.paper.trained import fall_rows
from pillm.paper.verdicts import TRAINED_METRIC

TRAINED = TRAINED_METRIC  # the claim frame's metric for a gradient opponent (pillm.paper.claims)


def trained_rows(
    runs: pl.DataFrame, margin: float, keys: tuple[str, ...] = ("variant", "seed")
) -> pl.DataFrame:
    """Per run with a gradient phase (a ``train_loss_first`` record): ``train_loss_drop``, the
    first step's training loss minus the final one (``pillm.lm.train.loss_fall``), and
    ``trained``, 1.0 when the drop is at least ``margin`` nats (a NaN loss: 0.0). ``keys`` name
    a run (the scaling study's add corpus and point); ``pillm.paper.trained.fall_rows``."""
    return fall_rows(runs, margin, keys)


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
