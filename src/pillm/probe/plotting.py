"""Plot helpers shared by the probe figures (``pillm.probe.figures``): theme, labels, colours,
panel grids, seed means, and the empty figure a build without data still gets.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # headless: rules run without a display
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

from pillm.paper.figures import save  # noqa: E402
from pillm.probe.summary import main_corpus, order_groups  # noqa: E402


def _theme() -> None:
    sns.set_theme(style="whitegrid", context="paper")


def _labels(df: pl.DataFrame) -> dict[str, str]:
    """model_group -> display label, in display order."""
    first = df.group_by("model_group").agg(pl.col("model_label").first())
    lab = dict(zip(first["model_group"], first["model_label"], strict=True))
    return {g: lab[g] for g in order_groups(lab)}


def _palette(labels: dict[str, str]) -> dict[str, tuple]:
    colors = sns.color_palette("colorblind", max(len(labels), 1))
    return {lab: colors[i] for i, lab in enumerate(labels.values())}


def _empty(ax: plt.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this build", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _grid(n: int, width: float = 2.5, height: float = 2.2) -> tuple[plt.Figure, list[plt.Axes]]:
    ncols = max(1, min(3, n))
    nrows = max(1, math.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols + 0.6, height * nrows), squeeze=False
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat


def _on(df: pl.DataFrame, corpus: str | None) -> pl.DataFrame:
    return df.filter(pl.col("corpus").eq_missing(corpus))


def _seed_mean(df: pl.DataFrame, keys: list[str], cols: list[str]) -> pl.DataFrame:
    aggs = [pl.col(c).cast(pl.Float64).mean().alias(c) for c in cols]
    aggs += [pl.col(c).cast(pl.Float64).std().fill_null(0.0).alias(f"{c}_sd") for c in cols]
    return df.group_by(keys).agg(aggs).sort(keys)


def _per_model_blocks(df: pl.DataFrame, main: str | None, pdf: str, png: str):
    """The main corpus's fitted blocks, the model labels and one panel per model; with no
    blocks, an empty figure is saved and the labels are empty."""
    main = main_corpus(df, main or "wikitext2")
    d = _on(df, main).filter(pl.col("r2_lin").is_not_null())
    labels = _labels(d) if d.height else {}
    _theme()
    fig, axes = _grid(len(labels) or 1, 2.6, 2.3)
    if not labels:
        _empty(axes[0], "probe results")
        save(fig, pdf, png)
    return d, labels, fig, axes
