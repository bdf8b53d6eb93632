"""Figures of the SAFFU study, from its summaries: held-out loss along AdamW (warm vs cold, at
the chosen rates) per train fraction and setting, and test perplexity by train size (the four
models) beside the setting ablation."""

from __future__ import annotations

from pathlib import Path

import polars as pl

KINDS = [  # (init, metric, label): the models of the size and ablation panels
    ("kn", "test_ppl", "Kneser-Ney"),
    ("explicit", "init_test_ppl", "explicit solution"),
    ("explicit", "test_ppl", "warm: explicit + AdamW"),
    ("random", "test_ppl", "cold: log-unigram + AdamW"),
]


def chosen_curves(curves: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """The curve rows of each run at its chosen rate (the first seed also tried the others)."""
    lr = runs.filter(pl.col("metric") == "lr").select(
        "variant", "init", "fraction", "seed", pl.col("value").alias("chosen")
    )
    keys = ["variant", "init", "fraction", "seed"]
    return (
        curves.with_columns(pl.col("fraction").cast(pl.Float64), pl.col("seed").cast(pl.Int64))
        .join(lr.with_columns(pl.col("seed").cast(pl.Int64)), on=keys)
        .filter(pl.col("lr") == pl.col("chosen"))
    )


def saffu_figures(summary_dir: str, main_setting: str, out_dir: str) -> None:
    """``saffu_curves``: held-out loss along the AdamW steps, warm vs cold, one panel per train
    fraction of the main setting and per other setting (mean over seeds, band: min-max);
    ``saffu_ablation``: test perplexity by train tokens (main setting, the four models) and per
    setting on the full train split (bars: seed mean, ticks: seeds)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")  # headless: rules run without a display
    import matplotlib.pyplot as plt
    import seaborn as sns

    from pillm.paper.figures import save

    d, out = Path(summary_dir), Path(out_dir)
    runs = pl.read_parquet(d / "saffu_runs.parquet").with_columns(
        pl.col("fraction").cast(pl.Float64)
    )
    curves = chosen_curves(pl.read_parquet(d / "saffu_curves.parquet"), runs).filter(
        pl.col("val_loss").is_not_null()
    )
    sns.set_theme(style="whitegrid", context="paper")
    colors = dict(zip(["explicit", "random"], sns.color_palette("colorblind", 2), strict=True))
    panels = sorted(
        {(v, f) for v, f in curves.select("variant", "fraction").unique().rows()},
        key=lambda p: (p[0] != main_setting, p[0], p[1]),
    )
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(2.1 * max(1, len(panels)) + 0.6, 2.5),
                             squeeze=False, sharey=True)  # fmt: skip
    for ax, (s, f) in zip(axes[0], panels, strict=False):
        sub = curves.filter((pl.col("variant") == s) & (pl.col("fraction") == f))
        for init, label in (("explicit", "warm (explicit start)"), ("random", "cold (unigram)")):
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
            ax.plot(g["step"], g["m"], "-o", ms=2, color=colors[init], label=label)
            ax.fill_between(g["step"], g["lo"], g["hi"], color=colors[init], alpha=0.2, lw=0)
        ax.set_title(f"{s}, {100 * f:g}% train", fontsize=7)
        ax.set_xlabel("AdamW step")
    axes[0][0].set_ylabel("held-out loss (nats/token)")
    axes[0][0].legend(fontsize=6)
    save(fig, out / "saffu_curves.pdf", out / "saffu_curves.png")

    def frame(variant_filter: pl.Expr) -> pl.DataFrame:
        frames = [
            runs.filter(variant_filter & (pl.col("init") == init) & (pl.col("metric") == metric))
            .select("variant", "fraction", "seed", "value")
            .with_columns(pl.lit(label).alias("model"))
            for init, metric, label in KINDS
        ]
        return pl.concat(frames)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.5, 2.8), width_ratios=[1, 1.4],
                                   layout="constrained")  # fmt: skip
    palette = dict(zip([k[2] for k in KINDS], ["0.3", "0.65", colors["explicit"], colors["random"]],
                       strict=True))  # fmt: skip
    tokens = runs.filter((pl.col("variant") == main_setting) & (pl.col("metric") == "train_tokens"))
    sizes = frame((pl.col("variant") == main_setting) | (pl.col("variant") == "kneser_ney")).join(
        tokens.select("fraction", "seed", pl.col("value").alias("tokens")).unique(),
        on=["fraction", "seed"],
    )
    for label, color in palette.items():
        g = (
            sizes.filter(pl.col("model") == label)
            .group_by("tokens")
            .agg(pl.col("value").mean())
            .sort("tokens")
        )
        if g.height:
            ax1.plot(g["tokens"], g["value"], "-o", ms=3, color=color, label=label)
    ax1.set(xscale="log", yscale="log", xlabel="train tokens", ylabel="test perplexity")
    ticks = sorted(set(sizes["tokens"].to_list()))  # the train sizes run, as ticks
    ax1.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax1.set_xticks(ticks, [f"{t / 1e3:,.0f}k" for t in ticks])
    ax1.legend(fontsize=6)
    ablation = frame(pl.col("fraction") == 1.0).filter(pl.col("variant") != "kneser_ney")
    df = ablation.to_pandas()
    order = sorted(ablation["variant"].unique().to_list(), key=lambda s: (s != main_setting, s))
    if len(df):
        hue = [k[2] for k in KINDS[1:]]
        sns.barplot(data=df, x="variant", y="value", hue="model", order=order, hue_order=hue,
                    errorbar=None, palette=palette, ax=ax2)  # fmt: skip
        sns.stripplot(data=df, x="variant", y="value", hue="model", order=order, hue_order=hue,
                      dodge=True, palette=dict.fromkeys(hue, "0.2"), size=2.5, legend=False,
                      ax=ax2)  # fmt: skip
        ax2.set_yscale("log")
        ax2.legend(fontsize=6, title="")
    ax2.set(xlabel="setting (full train split)", ylabel="test perplexity (log scale)")
    save(fig, out / "saffu_ablation.pdf", out / "saffu_ablation.png")
