"""Figures of the SAFFU baseline: held-out loss along AdamW (warm vs cold) and test perplexity per
setting, from the SAFFU summaries."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def saffu_figures(summary_dir: str, main_setting: str, out_dir: str) -> None:
    """``saffu_curves``: held-out loss along the AdamW steps, warm vs cold, for every setting
    (mean over seeds, band: min-max); ``saffu_ablation``: test perplexity per setting of the
    explicit solution, warm and cold (bars: seed mean, ticks: seeds)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: rules run without a display
    import matplotlib.pyplot as plt
    import seaborn as sns

    from pillm.paper.figures import save

    d, out = Path(summary_dir), Path(out_dir)
    curves = pl.read_parquet(d / "saffu_curves.parquet").filter(pl.col("val_loss").is_not_null())
    sns.set_theme(style="whitegrid", context="paper")
    colors = dict(zip(["explicit", "random"], sns.color_palette("colorblind", 2), strict=True))
    settings = sorted(curves["variant"].unique().to_list(), key=lambda s: (s != main_setting, s))
    fig, axes = plt.subplots(1, len(settings), figsize=(2.3 * len(settings) + 0.6, 2.5),
                             squeeze=False, sharey=True)  # fmt: skip
    for ax, s in zip(axes[0], settings, strict=True):
        sub = curves.filter(pl.col("variant") == s)
        for init, label in (("explicit", "warm (explicit start)"), ("random", "cold (random)")):
            g = (
                sub.filter(pl.col("init") == init)
                .group_by("step")
                .agg(
                    pl.col("val_loss").mean().alias("m"),
                    pl.col("val_loss").min().alias("lo"),
                    pl.col("val_loss").max().alias("hi"),
                )  # fmt: skip
                .sort("step")
            )
            if g.height == 0:
                continue
            ax.plot(g["step"], g["m"], "-o", ms=2.5, color=colors[init], label=label)
            ax.fill_between(g["step"], g["lo"], g["hi"], color=colors[init], alpha=0.2, lw=0)
        ax.set_title(s + (" (main)" if s == main_setting else ""), fontsize=8)
        ax.set_xlabel("AdamW step")
    axes[0][0].set_ylabel("held-out loss (nats/token)")
    axes[0][0].legend(fontsize=6)
    save(fig, out / "saffu_curves.pdf", out / "saffu_curves.png")

    runs = pl.read_parquet(d / "saffu_runs.parquet")
    kinds = [("explicit", "init_test_ppl", "explicit solution"),
             ("explicit", "test_ppl", "warm: explicit + AdamW"),
             ("random", "test_ppl", "cold: random + AdamW")]  # fmt: skip
    frames = [
        runs.filter((pl.col("init") == init) & (pl.col("metric") == metric))
        .select("variant", "seed", "value")
        .with_columns(pl.lit(label).alias("model"))
        for init, metric, label in kinds
    ]
    df = pl.concat(frames).to_pandas()
    order = sorted(runs["variant"].unique().to_list(), key=lambda s: (s != main_setting, s))
    fig, ax = plt.subplots(figsize=(5.5, 2.8))
    if len(df):
        shades = ["0.6", colors["explicit"], colors["random"]]
        pal = dict(zip([k[2] for k in kinds], shades, strict=True))
        sns.barplot(data=df, x="variant", y="value", hue="model", order=order, errorbar=None,
                    palette=pal, ax=ax)  # fmt: skip
        sns.stripplot(data=df, x="variant", y="value", hue="model", order=order, dodge=True,
                      color="0.2", size=2.5, legend=False, ax=ax)  # fmt: skip
        ax.set_yscale("log")
        ax.legend(fontsize=6, title="")
    ax.set(xlabel="setting", ylabel="test perplexity (log scale)")
    save(fig, out / "saffu_ablation.pdf", out / "saffu_ablation.png")
