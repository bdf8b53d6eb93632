"""Did a gradient-trained run train? The rule every study's aggregation applies to its records.

A run trained when a loss it records at its start lies a declared threshold or more above the
one it ends with: the LM trainer's first and final training loss (``pillm.lm.train.loss_fall``,
``lm.trained_margin`` nats) for the LM, scaling and sensitivity runs; the held-out loss of the
start and of the kept weights for SAFFU's AdamW starts (the same margin). The flag is computed
from the records at aggregation, so the rule can change without rerunning a training job.
A claim against an opponent whose flag is 0 at a paired seed is not evaluated
(``pillm.paper.claims.untrained``).
"""

from __future__ import annotations

import polars as pl

from pillm.paper.verdicts import TRAINED_METRIC


def fall_rows(
    runs: pl.DataFrame,
    margin: float,
    keys: tuple[str, ...],
    first: str = "train_loss_first",
    final: str = "train_loss_final",
    drop: str = "train_loss_drop",
) -> pl.DataFrame:
    """Per run (``keys``) with a ``first`` record in the tidy ``runs``: metric ``drop``, the
    ``first`` value minus the ``final`` one, and ``trained``, 1.0 when that drop is at least
    ``margin`` (a missing or NaN loss: 0.0). Each row keeps the run's other columns."""
    start = runs.filter(pl.col("metric") == first)
    end = runs.filter(pl.col("metric") == final).select(*keys, pl.col("value").alias("_end"))
    fell = (
        start.join(end, on=list(keys), how="left")
        .with_columns(metric=pl.lit(drop), value=pl.col("value") - pl.col("_end"))
        .drop("_end")
    )
    flag = fell.with_columns(
        metric=pl.lit(TRAINED_METRIC),
        # polars orders NaN above every number: a NaN drop is not a fall
        value=((pl.col("value") >= margin) & pl.col("value").is_not_nan())
        .fill_null(False)
        .cast(pl.Float64),
    )
    return pl.concat([fell, flag]).select(runs.columns)
