"""Aggregate every run's tidy records into summary parquet files with one polars chain.

Outputs (``results/summary``):
- ``runs.parquet``: every metric row of every run, as written.
- ``lm.parquet``: mean, std and n over seeds per (variant, metric) with the expected seed count,
  so a missing seed shows up as ``n < n_expected`` instead of silently vanishing.
- ``curves.parquet``: all training curves stacked.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .records import IDENTITY, atomic_path, read_records

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
    runs = pl.DataFrame(read_records(metrics_paths), infer_schema_length=None)
    write_parquet(runs, out / "runs.parquet")
    write_parquet(stack_parquet(curve_paths), out / "curves.parquet")
    write_parquet(stack_parquet(solve_paths), out / "solves.parquet")
    write_parquet(pl.DataFrame(read_records(sample_paths)), out / "samples.parquet")
    write_parquet(summarise(runs, variants, seeds), out / "lm.parquet")


def aggregate_probe(
    block_paths: list[str], gradient_paths: list[str], metrics_paths: list[str], out_dir: str
) -> None:
    """Probe jobs -> ``probe.parquet`` (one row per model x corpus x block), ``probe_gradient``
    (gradient-trained map curves) and ``probe_jobs`` (one row per job: cost and provenance)."""
    out = Path(out_dir)
    blocks = pl.concat([pl.read_parquet(p) for p in block_paths], how="diagonal_relaxed")
    blocks = blocks.with_columns(pl.col("seed").cast(pl.Int64)).sort("model", "corpus", "layer")
    write_parquet(blocks, out / "probe.parquet")
    grads = pl.concat([pl.read_parquet(p) for p in gradient_paths], how="diagonal_relaxed")
    write_parquet(grads.sort("model", "corpus", "layer", "step"), out / "probe_gradient.parquet")
    records = pl.DataFrame(read_records(metrics_paths), infer_schema_length=None)
    jobs = records.pivot(
        on="metric",
        index=["variant", "corpus", "model_group", "model_label", "device", "device_name"],
        values="value",
    ).rename({"variant": "model"})
    write_parquet(jobs.sort("model", "corpus"), out / "probe_jobs.parquet")


def aggregate_generative(
    metrics_paths: list[str],
    curve_paths: list[str],
    sampler_paths: list[str],
    classifier_paths: list[str],
    out_dir: str,
) -> None:
    """Generative jobs -> ``generative.parquet`` (one row per dataset x setting, metrics as
    columns), ``generative_curves`` (λ and AdamW-loss curves), ``generative_samplers`` (quality
    per ODE solver and step count) and ``generative_classifiers`` (feature CNN accuracy and the
    real-vs-real floor of every metric)."""
    out = Path(out_dir)
    index = ["variant", "corpus", "model", "method", "ablation", "level", "sampler", "data_policy"]
    index += ["device", "device_name", "git_rev"]
    records = pl.DataFrame(read_records(metrics_paths), infer_schema_length=None)
    runs = records.pivot(on="metric", index=index, values="value")
    runs = runs.rename({"variant": "setting", "corpus": "dataset"})
    write_parquet(runs.sort("dataset", "setting"), out / "generative.parquet")
    curves = pl.concat([pl.read_parquet(p) for p in curve_paths], how="diagonal_relaxed")
    write_parquet(curves.filter(pl.col("curve") != "none"), out / "generative_curves.parquet")
    samplers = pl.concat([pl.read_parquet(p) for p in sampler_paths], how="diagonal_relaxed")
    write_parquet(samplers.sort("dataset", "setting", "sampler", "steps"),
                  out / "generative_samplers.parquet")  # fmt: skip
    cls = pl.DataFrame(read_records(classifier_paths), infer_schema_length=None)
    cls = cls.pivot(on="metric", index=["corpus", "device", "device_name"], values="value")
    write_parquet(cls.rename({"corpus": "dataset"}).sort("dataset"),
                  out / "generative_classifiers.parquet")  # fmt: skip
