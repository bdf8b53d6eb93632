"""Which rows of two builds are the same item: each study summary's key columns.

``pillm diff`` pairs the rows of two builds' summaries by key: an aggregated summary's label
columns, a wide summary's ``ITEM_KEYS``.
"""

from __future__ import annotations

import polars as pl

# Wide summaries: the columns naming an item; rows sharing them are seeds (replicates).
ITEM_KEYS: dict[str, list[str]] = {
    "probe.parquet": ["model_group", "corpus", "layer"],
    "probe_jobs.parquet": ["model_group", "corpus"],
    "probe_gradient.parquet": ["model_group", "corpus", "layer", "step"],
    "generative.parquet": ["dataset", "setting"],
    "generative_samplers.parquet": ["dataset", "setting", "sampler", "steps"],
    "generative_classifiers.parquet": ["dataset"],
    "lora.parquet": ["model_group", "method"],
    "generative_lr.parquet": ["dataset", "family", "lr"],  # one row per grid rate
    "generative_speed.parquet": ["dataset", "family"],
    "sensitivity.parquet": ["point", "lr", "dropout"],
}
# Per-seed records and curves: their aggregates are the summaries above.
NOT_COMPARED = {
    "runs.parquet": "per-seed records (lm.parquet holds their mean/std/n)",
    "saffu_runs.parquet": "per-seed records (saffu.parquet holds their mean/std/n)",
    "curves.parquet": "training curves",
    "saffu_curves.parquet": "training curves",
    "generative_curves.parquet": "curves",
    "lora_curves.parquet": "curves",
    "generative_lr_curves.parquet": "curves",
    "sensitivity_runs.parquet": "per-seed records (sensitivity.parquet holds their means)",
    "samples.parquet": "generated text",
    "solves.parquet": "λ-sweep records",
    "claims.parquet": "compared as claims",
}
# Columns that describe where or how a row was made, not what it is.
PROVENANCE = {
    "device",
    "device_name",
    "git_rev",
    "weights_sha256",
    "config_hash",
    "seed",
    "seeds",
    "n_expected",
    "cuda",
    "cuda_visible_devices",
    "numpy",
    "python",
    "torch",
}
# Labels of the data an item was measured on: compared as context, not part of its identity
# (a new tokenizer is one listed change, not every metric "only in A" and "only in B").
CONTEXT = ("tokenizer", "data_policy")
EMPTY = {
    "key": pl.String,
    "metric": pl.String,
    "mean": pl.Float64,
    "std": pl.Float64,
    "n": pl.Int64,
}


def metric_rows(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """One row per item x metric: ``key`` (the item's identity as text, 'col=value; ...'),
    ``metric``, ``mean``, ``std`` (null for one seed), ``n``. An aggregated summary (columns
    metric/mean/std/n, as lm.parquet) is taken as it is; a wide one is grouped by its item
    columns (``ITEM_KEYS``), the rows of one item being its seeds."""
    skip = PROVENANCE | set(CONTEXT)
    if {"metric", "mean", "std", "n"} <= set(df.columns):
        # The item: its label columns; float columns (ci95, ...) are statistics, not names.
        keys = [
            c
            for c in df.columns
            if c not in {"metric", "mean", "std", "n"} | skip
            and not df[c].dtype.is_float()
            and not isinstance(df[c].dtype, pl.List)
        ]
        long = df.select(*keys, "metric", "mean", "std", pl.col("n").cast(pl.Int64))
    else:
        keys = [c for c in ITEM_KEYS.get(name, _guess_keys(df)) if c in df.columns]
        values = [
            c for c in df.columns if c not in keys and c not in skip and df[c].dtype.is_numeric()
        ]
        if not values:
            return pl.DataFrame(schema=EMPTY)
        long = (
            df.select(*keys, *(pl.col(c).cast(pl.Float64) for c in values))
            .unpivot(index=keys, on=values, variable_name="metric")
            .drop_nulls("value")  # a metric a row does not have is absent, not a zero
            .group_by(*keys, "metric")
            .agg(
                pl.col("value").mean().alias("mean"),
                pl.col("value").std().alias("std"),  # sample std over seeds; null for one
                pl.len().cast(pl.Int64).alias("n"),
            )
        )
    parts = [pl.format(f"{k}={{}}", pl.col(k).cast(pl.String).fill_null("-")) for k in keys]
    key = pl.concat_str(parts, separator="; ") if keys else pl.lit("")
    return long.select(key.alias("key"), "metric", "mean", "std", "n")


def _guess_keys(df: pl.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in PROVENANCE and not df[c].dtype.is_float()]
