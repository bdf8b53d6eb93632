"""The LM study's summaries (the ``aggregate`` command): every run's records stacked into
``results/<name>/summary``.

- ``runs.parquet``: every metric row of every run (metrics and extras);
- ``lm.parquet``: mean/std/ci95/n over seeds per variant and metric (``pillm.paper.tidy``), with
  the runs expected, so a missing run shows;
- ``curves``, ``solves``, ``samples``: the runs' training curves, PIL solves and generation
  samples, stacked;
- ``claims/lm.parquet``: the per-seed values the claims are tested on (``pillm.paper``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.tidy import read_runs, stack_parquet, summarise, write_parquet


def aggregate(
    metrics_paths: list[str],
    curve_paths: list[str],
    solve_paths: list[str],
    sample_paths: list[str],
    variants: list[str],
    seeds: list[int],
    out_dir: str,
) -> None:
    out = Path(out_dir)
    runs = read_runs(metrics_paths)
    write_parquet(runs, out / "runs.parquet")
    write_parquet(stack_parquet(curve_paths), out / "curves.parquet")
    write_parquet(stack_parquet(solve_paths), out / "solves.parquet")
    write_parquet(read_runs(sample_paths), out / "samples.parquet")
    write_parquet(summarise(runs, {"variant": variants}, seeds), out / "lm.parquet")
    seed_rows = runs.select(pl.col("variant").alias("arm"), "seed", "metric", "value")
    write_claim_frame(out / "claims" / "lm.parquet", seed_rows.iter_rows(named=True))
