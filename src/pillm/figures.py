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


def lambda_sweep(solves_path: str, pdf: str, png: str) -> None:
    """Held-out MSE of each layer's ridge solve along the λ grid (first seed), per variant."""
    df = pl.read_parquet(solves_path)
    df = df.filter(pl.col("seed") == df["seed"].min())
    df = df.with_columns(
        (pl.col("val_mse") / pl.col("val_mse").min().over("variant", "layer")).alias("rel_mse")
    ).filter(pl.col("rel_mse").is_finite())  # an all-zero target (residual) has nothing to show
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    sns.lineplot(
        data=df.to_pandas(),
        x="lambda_rel",
        y="rel_mse",
        hue="variant",
        style="layer",
        markers=True,
        ax=ax,
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel=r"$\lambda$ / mean diag$(H^\top H)$",
        ylabel="held-out MSE / best",
    )
    ax.legend(fontsize=6, ncol=2)
    save(fig, pdf, png)


def feature_width(summary_path: str, pdf: str, png: str) -> None:
    """Test perplexity of FFNs refitted with random features of each width, against the baseline."""
    from .lm_report import FEATURE_VARIANTS

    s = pl.read_parquet(summary_path).filter(pl.col("metric") == "test_ppl")
    base = s.filter(pl.col("variant") == "baseline")["mean"]
    df = s.filter(pl.col("variant").is_in(FEATURE_VARIANTS)).to_pandas()
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(4.5, 3.0))
    sns.barplot(
        data=df,
        x="variant",
        y="mean",
        order=[v for v in FEATURE_VARIANTS if v in set(df["variant"])],
        color="C0",
        ax=ax,
    )
    if len(base):
        ax.axhline(base[0], color="k", ls="--", lw=1, label="baseline (trained FFN)")
        ax.legend(fontsize=7)
    lo = min(df["mean"].min(), base[0] if len(base) else df["mean"].min())
    ax.set(ylim=(0.95 * lo, None), xlabel="random features (refit)", ylabel="test perplexity")
    save(fig, pdf, png)
