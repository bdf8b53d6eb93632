"""Seaborn figures from the summaries (each figure made by exactly one function and rule)."""

from __future__ import annotations

import matplotlib

from pillm.paper.figures import save  # noqa: E402

matplotlib.use("Agg")  # headless: rules run without a display
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402


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
    if "random_out" in df.columns:  # the random-output control repeats PIL-then-attn's solves
        df = df.filter(~pl.col("random_out"))
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
    positive = df.filter(pl.col("lambda_rel") > 0)["lambda_rel"]
    if len(positive) < len(df) and len(positive):  # λ = 0 (no ridge) on the axis: linear near 0
        ax.set_xscale("symlog", linthresh=float(positive.min()))
        ax.set_xlim(left=0)
    else:
        ax.set_xscale("log")
    ax.set(
        yscale="log",
        xlabel=r"$\lambda$ / mean diag$(H^\top H)$",
        ylabel="held-out MSE / best",
    )
    ax.legend(fontsize=6, ncol=2)
    save(fig, pdf, png)


def feature_width(summary_path: str, pdf: str, png: str) -> None:
    """Test perplexity of the baseline with its FFNs refitted by random features of each width."""
    from pillm.lm.comparisons import WIDTH_SWEEP
    from pillm.lm.feature_maps import shape, shape_tex

    s = pl.read_parquet(summary_path).filter(pl.col("metric") == "test_ppl")
    ppl = {r["variant"]: r for r in s.iter_rows(named=True)}
    sweep = [(w, ppl[v]) for v, w in WIDTH_SWEEP.items() if v in ppl]
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(4.5, 3.0))
    if sweep:
        ax.errorbar(
            [w for w, _ in sweep],
            [r["mean"] for _, r in sweep],
            yerr=[r["std"] or 0.0 for _, r in sweep],
            marker="o",
            capsize=3,
            label="single projection",
        )
    if "refit" in ppl:
        ax.errorbar(
            [shape("refit")[0] * shape("refit")[1]],  # all its features, in units of d
            [ppl["refit"]["mean"]],
            yerr=[ppl["refit"]["std"] or 0.0],
            marker="s",
            ls="none",
            capsize=3,
            label=f"Bi-PIL (${shape_tex('refit')}$)",
        )
    if "baseline" in ppl:
        ax.axhline(
            ppl["baseline"]["mean"], color="k", ls="--", lw=1, label="baseline (trained FFN)"
        )
    ax.set(
        xscale="log", xlabel="random features per FFN (multiples of d)", ylabel="test perplexity"
    )
    ax.set_xticks([1, 2, 4, 8, 16], labels=["1", "2", "4", "8", "16"])
    ax.legend(fontsize=7)
    save(fig, pdf, png)
