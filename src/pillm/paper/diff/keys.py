"""Which rows of two builds are the same item: each study summary's key columns, declared.

``pillm diff`` pairs the rows of two builds' summaries by key. The keys are declared per file
(``SUMMARY_KEYS``), never guessed from column types: a key may be a float (SAFFU's data
``fraction``, a grid's learning rate), and a float statistic (``ci95``) is no key. Two rows of one
build under one key would be paired with the other build's rows arbitrarily, so every key is
checked unique before a join (:func:`require_unique`); a duplicate stops the diff with a message
naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pillm.paper.diff.builds import DiffInputError


@dataclass(frozen=True)
class ItemKeys:
    """``item``: the columns naming what a row measured. ``replicates``: in a wide summary
    (one row per item and seed), the columns telling an item's rows apart; their rows are pooled
    into mean, std and n. An aggregated summary (columns metric, mean, std, n) has one row per
    item and metric, and a wide one without replicates one row per item."""

    item: tuple[str, ...]
    replicates: tuple[str, ...] = ()


SUMMARY_KEYS: dict[str, ItemKeys] = {
    # Aggregated over seeds (pillm.paper.tidy): one row per item and metric.
    "lm.parquet": ItemKeys(("experiment", "variant", "corpus")),
    "saffu.parquet": ItemKeys(("variant", "init", "fraction", "agg", "block", "radius", "corpus")),
    "kneser_ney.parquet": ItemKeys(("variant", "init", "fraction", "corpus")),
    # Wide: one row per item and seed, the seed named by its column or by its model (pillm-s<k>).
    "probe.parquet": ItemKeys(("model_group", "corpus", "layer"), ("model",)),
    "probe_jobs.parquet": ItemKeys(("model_group", "corpus"), ("model",)),
    "probe_gradient.parquet": ItemKeys(("model_group", "corpus", "layer", "step"), ("model",)),
    "generative.parquet": ItemKeys(("dataset", "setting"), ("seed",)),
    "generative_samplers.parquet": ItemKeys(("dataset", "setting", "sampler", "steps"), ("seed",)),
    "lora.parquet": ItemKeys(("model_group", "method"), ("model",)),
    "generative_speed.parquet": ItemKeys(("dataset", "family"), ("seed",)),
    # Wide, one row per item.
    "generative_classifiers.parquet": ItemKeys(("dataset",)),
    "generative_lr.parquet": ItemKeys(("dataset", "family", "lr")),  # one row per grid rate
    "sensitivity.parquet": ItemKeys(("point", "lr", "dropout")),  # seeds already averaged
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
    "data_revisions",
    "numpy",
    "python",
    "torch",
}
# Labels of the data an item was measured on: compared as context, not part of its identity
# (a new tokenizer is one listed change, not every metric "only in A" and "only in B").
CONTEXT = ("tokenizer", "data_policy")
AGGREGATED = ("metric", "mean", "std", "n")
EMPTY = {
    "key": pl.String,
    "metric": pl.String,
    "mean": pl.Float64,
    "std": pl.Float64,
    "n": pl.Int64,
}


def require_unique(df: pl.DataFrame, columns: list[str], where: str) -> None:
    """Stop when two rows of ``df`` share the values of ``columns``: a join on them would pair
    rows of two builds arbitrarily. ``where`` names the file and build in the message."""
    dup = df.filter(pl.struct(columns).is_duplicated())
    if dup.height:
        first = dup.row(0, named=True)
        key = "; ".join(f"{c}={first[c]}" for c in columns)
        raise DiffInputError(
            f"{where}: {dup.height} rows share the key {key}; declare the column that tells "
            "them apart in pillm.paper.diff.keys.SUMMARY_KEYS"
        )


def metric_rows(name: str, df: pl.DataFrame, side: str) -> pl.DataFrame:
    """One row per item x metric of the summary ``name`` of build ``side``: ``key`` (the item's
    identity as text, 'col=value; ...'), ``metric``, ``mean``, ``std`` (null for one seed),
    ``n``. An aggregated summary (columns metric/mean/std/n, as lm.parquet) is taken as it is; a
    wide one is grouped by its item columns, the rows of one item being its seeds. Its columns
    ``SUMMARY_KEYS[name]`` names are its keys (those it has); a key shared by two rows stops
    with :class:`DiffInputError`."""
    declared = SUMMARY_KEYS[name]
    keys = [c for c in declared.item if c in df.columns]
    parts = [pl.format(f"{k}={{}}", pl.col(k).cast(pl.String).fill_null("-")) for k in keys]
    key = (pl.concat_str(parts, separator="; ") if keys else pl.lit("")).alias("key")
    where = f"summary/{name} of build {side}"
    if set(AGGREGATED) <= set(df.columns):
        long = df.select(key, "metric", "mean", "std", pl.col("n").cast(pl.Int64))
        require_unique(long, ["key", "metric"], where)
        return long
    replicates = [c for c in declared.replicates if c in df.columns]
    require_unique(df.select(key, *replicates), ["key", *replicates], where)
    skip = PROVENANCE | set(CONTEXT) | set(replicates)
    values = [c for c in df.columns if c not in keys and c not in skip and df[c].dtype.is_numeric()]
    if not values:
        return pl.DataFrame(schema=EMPTY)
    return (
        df.select(key, *(pl.col(c).cast(pl.Float64) for c in values))
        .unpivot(index="key", on=values, variable_name="metric")
        .drop_nulls("value")  # a metric a row does not have is absent, not a zero
        .group_by("key", "metric")
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("std"),  # sample std over seeds; null for one
            pl.len().cast(pl.Int64).alias("n"),
        )
        .select("key", "metric", "mean", "std", "n")
    )
