"""Seaborn figures from the summaries (each figure made by exactly one function and rule)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: rules run without a display
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

from .records import atomic_path  # noqa: E402


def save(fig: plt.Figure, pdf: str | Path, png: str | Path) -> None:
    for path in (pdf, png):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], bbox_inches="tight", dpi=150)
    plt.close(fig)


def training_curves(curves_path: str, pdf: str, png: str) -> None:
    """Train loss (smoothed per seed) and validation loss against tokens seen, per variant."""
    curves = pl.read_parquet(curves_path).sort("variant", "seed", "step")
    smooth = curves.with_columns(
        pl.col("train_loss").rolling_mean(window_size=20, min_samples=1).over("variant", "seed")
    ).to_pandas()
    val = curves.filter(pl.col("val_loss").is_not_null()).to_pandas()
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    sns.lineplot(data=smooth, x="tokens", y="train_loss", hue="variant", errorbar="sd", ax=ax)
    sns.scatterplot(
        data=val, x="tokens", y="val_loss", hue="variant", marker="o", s=18, ax=ax, legend=False
    )
    ax.set(xlabel="training tokens", ylabel="cross-entropy (nats/token)", title="")
    ax.legend(title="train loss (line) / validation (dots)", fontsize=7, title_fontsize=7)
    save(fig, pdf, png)
