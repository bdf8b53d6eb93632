"""Figures of the generative study: sample grids, λ curves, samplers and quality against fit time."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.generative.report import DATASETS, load


def gen_figures(summary_dir: str, results_dir: str, out_dir: str) -> None:
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    import seaborn as sns

    from pillm.paper.figures import save

    out = Path(out_dir)
    tabs = load(summary_dir)
    runs = tabs["generative"]
    datasets = [d for d in DATASETS if d in runs["dataset"].unique().to_list()]
    budgets = sorted(
        runs.filter(pl.col("method") == "adamw")["level"].unique().to_list(),
        key=lambda s: float(s.rstrip("x")),
    )
    # 1. Sample grids: PIL and the matched-budget AdamW twin, flow and diffusion, per dataset.
    first = budgets[0].rstrip("x").replace(".", "p") if budgets else None
    cols = [("flow_pil", "PIL flow"), (f"flow_adamw{first}", f"AdamW flow ({budgets[0]})"),
            ("diff_pil", "PIL diffusion"), (f"diff_adamw{first}", f"AdamW diff. ({budgets[0]})")]  # fmt: skip
    fig, axes = plt.subplots(len(datasets), len(cols), figsize=(2.2 * len(cols), 2.4 * len(datasets)),
                             squeeze=False)  # fmt: skip
    for i, ds in enumerate(datasets):
        for j, (setting, title) in enumerate(cols):
            ax = axes[i][j]
            ax.set_axis_off()
            path = Path(results_dir) / ds / setting / "samples.png"
            if path.exists():
                ax.imshow(mpimg.imread(path))
            ax.set_title(f"{DATASETS[ds]}: {title}", fontsize=7)
    save(fig, out / "gen_samples.pdf", out / "gen_samples.png")

    sns.set_theme(style="whitegrid", context="paper")
    # 2. λ curves of the main PIL fits (diffusion: one curve per bucket).
    curves = tabs["generative_curves"].filter(pl.col("curve") == "lambda")
    curves = curves.filter(pl.col("setting").is_in(["flow_pil", "diff_pil"])).to_pandas()
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 2.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        sub = curves[curves["dataset"] == ds]
        sns.lineplot(data=sub, x="x", y="y", hue="setting", units="bucket", estimator=None,
                     marker="o", ax=ax, lw=1)  # fmt: skip
        ax.set(xscale="log", yscale="log", xlabel="$\\lambda$ / mean diag $H^\\top H$",
               ylabel="held-out MSE", title=DATASETS[ds])  # fmt: skip
    save(fig, out / "gen_lambda.pdf", out / "gen_lambda.png")

    # 3. Sample quality against velocity evaluations, Euler vs Heun.
    samp = tabs["generative_samplers"].filter(pl.col("setting") == "flow_pil").to_pandas()
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 2.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        sns.lineplot(data=samp[samp["dataset"] == ds], x="nfe", y="fd_self", hue="sampler",
                     marker="o", ax=ax)  # fmt: skip
        ax.set(xscale="log", xlabel="velocity evaluations per sample",
               ylabel="FD$_\\mathrm{self}$", title=f"{DATASETS[ds]}: PIL flow")  # fmt: skip
    save(fig, out / "gen_samplers.pdf", out / "gen_samplers.png")

    # 4. Quality against fit time: the PIL point and AdamW at each budget.
    pts = runs.filter(pl.col("ablation").is_in(["main", "budget"])).with_columns(
        pl.when(pl.col("method") == "pil").then(pl.lit("PIL"))
        .otherwise(pl.concat_str(pl.lit("AdamW "), pl.col("level"))).alias("fit")
    ).to_pandas()  # fmt: skip
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 2.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        sns.scatterplot(data=pts[pts["dataset"] == ds], x="fit_seconds", y="fd_self", hue="fit",
                        style="model", s=50, ax=ax)  # fmt: skip
        ax.set(xscale="log", xlabel="fit time (s)", ylabel="FD$_\\mathrm{self}$",
               title=DATASETS[ds])  # fmt: skip
    save(fig, out / "gen_budget.pdf", out / "gen_budget.png")
