"""Figures of the generative study: sample grids, λ curves, samplers, the held-out error of every
fit against its training time (AdamW's curves, the learning-rate grid, the output-layer arm, the
PIL points), and the output-layer arm's held-out error over its passes of the solve's pairs."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.generative.aggregate import load
from pillm.generative.labels import DATASETS, FAMILY_NAMES

OUT_COLOR = "C2"  # the output-layer AdamW arm in every figure; AdamW's own is C3
RATE_COLORS = ("C0", "C1", "C4", "C5")  # the other rates of a learning-rate grid (dashed)


def gen_figures(summary_dir: str, results_dir: str, out_dir: str) -> None:
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    from pillm.paper.figures import save

    out = Path(out_dir)
    tabs = load(summary_dir)
    runs = tabs["generative"]
    datasets = [d for d in DATASETS if d in runs["dataset"].unique().to_list()]
    first = int(runs["seed"].min())
    # 1. Sample grids of the first seed: each PIL arm beside its AdamW twin.
    cols = [("flow_pil", "PIL flow"), ("flow_adamw", "AdamW flow"),
            ("diff_pil", "PIL diffusion"), ("diff_adamw", "AdamW diffusion")]  # fmt: skip
    fig, axes = plt.subplots(len(datasets), len(cols), figsize=(2.2 * len(cols), 2.4 * len(datasets)),
                             squeeze=False)  # fmt: skip
    for i, ds in enumerate(datasets):
        for j, (setting, title) in enumerate(cols):
            ax = axes[i][j]
            ax.set_axis_off()
            path = Path(results_dir) / ds / setting / f"seed{first}" / "samples.png"
            if path.exists() and path.stat().st_size:  # empty: a grid the GPU host did not send
                ax.imshow(mpimg.imread(path))
            ax.set_title(f"{DATASETS[ds]}: {title}", fontsize=7)
    save(fig, out / "gen_samples.pdf", out / "gen_samples.png")

    sns.set_theme(style="whitegrid", context="paper")
    # 2. λ curves of the PIL arms, first seed (bucketed diffusion: one curve per bucket).
    curves = tabs["generative_curves"]
    lam = curves.filter((pl.col("curve") == "lambda") & (pl.col("seed") == first))
    lam = lam.filter(pl.col("setting").is_in(["flow_pil", "diff_pil", "diff_bucketed_pil"]))
    lam = lam.to_pandas()
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 2.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        sub = lam[lam["dataset"] == ds]
        sns.lineplot(data=sub, x="x", y="y", hue="setting", units="bucket", estimator=None,
                     marker="o", ax=ax, lw=1)  # fmt: skip
        ax.set(xscale="log", yscale="log", xlabel="$\\lambda$ / mean diag $H^\\top H$",
               ylabel="held-out MSE", title=DATASETS[ds])  # fmt: skip
    save(fig, out / "gen_lambda.pdf", out / "gen_lambda.png")

    # 3. Sample quality against velocity evaluations, Euler vs Heun (PIL flow, first seed).
    samp = (
        tabs["generative_samplers"]
        .filter((pl.col("setting") == "flow_pil") & (pl.col("seed") == first))
        .to_pandas()
    )
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 2.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        sns.lineplot(data=samp[samp["dataset"] == ds], x="nfe", y="fd_self", hue="sampler",
                     marker="o", ax=ax)  # fmt: skip
        ax.set(xscale="log", xlabel="velocity evaluations per sample",
               ylabel="FD$_\\mathrm{self}$", title=f"{DATASETS[ds]}: PIL flow")  # fmt: skip
    save(fig, out / "gen_samplers.pdf", out / "gen_samplers.png")

    # 4. Held-out MSE against training time: AdamW's curve at the picked rate (every seed), the
    # grid's rates (first seed, shortened; dashed), the output-layer arm at its picked rate
    # (every seed; its features' caching time included) and each PIL fit (one point per seed).
    held = curves.filter(pl.col("curve") == "adamw_heldout").to_pandas()
    out_held = curves.filter(pl.col("curve") == "adamw_out_heldout").to_pandas()
    grid = tabs["generative_lr_curves"].to_pandas()
    pil = runs.filter((pl.col("method") == "pil") & (pl.col("ablation") == "main")).to_pandas()
    families = [f for f in FAMILY_NAMES if f in set(runs["family"].to_list())]
    fig, axes = plt.subplots(len(datasets), len(families),
                             figsize=(3.6 * len(families), 3.0 * len(datasets)), squeeze=False)  # fmt: skip
    for i, ds in enumerate(datasets):
        for j, fam in enumerate(families):
            ax = axes[i][j]
            p = pil[(pil["dataset"] == ds) & (pil["family"] == fam)]
            if not len(p):  # a pair this dataset does not run (bucketed: ablation datasets)
                ax.set_axis_off()
                continue
            g = grid[(grid["dataset"] == ds) & (grid["family"] == fam)] if len(grid) else grid
            for k, (lr, sub) in enumerate(g.groupby("lr") if len(g) else []):
                ax.plot(sub["seconds"], sub["y"], ls="--", lw=0.8, alpha=0.7, color=RATE_COLORS[k % 4],
                        label=f"grid {lr:g}")  # fmt: skip
            h = held[(held["dataset"] == ds) & (held["setting"] == f"{fam}_adamw")]
            for seed, sub in h.groupby("seed"):
                ax.plot(sub["seconds"], sub["y"], color="C3", lw=1.2,
                        label="AdamW (picked rate)" if seed == first else None)  # fmt: skip
            o = out_held[(out_held["dataset"] == ds) & (out_held["setting"] == f"{fam}_adamw_out")]
            for seed, sub in o.groupby("seed") if len(o) else []:
                ax.plot(sub["seconds"], sub["y"], color=OUT_COLOR, lw=1.2,
                        label="AdamW, output layer" if seed == first else None)  # fmt: skip
            ax.scatter(p["fit_seconds"], p["heldout_mse"], color="k", marker="*", s=60, zorder=3,
                       label="PIL solve")  # fmt: skip
            ax.set(xscale="log", xlabel="training / fit time (s)", ylabel="held-out MSE",
                   title=f"{DATASETS[ds]}: {FAMILY_NAMES[fam]}")  # fmt: skip
            ax.xaxis.set_major_formatter(ScalarFormatter())  # seconds, not powers of ten
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.title.set_fontsize(7)
            if i == 0 and j == 0:
                ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, out / "gen_budget.pdf", out / "gen_budget.png")

    # 5. The output-layer arm's held-out MSE over its passes of the PIL solve's pairs (pass 1: as
    # many pairs seen as the solve): every seed at its picked rate (solid, its kept pass marked),
    # the other rates of the first seed (dashed) and each seed's PIL fit (dotted level).
    grid_out = curves.filter(pl.col("curve") == "adamw_out_grid").to_pandas()
    runs_pd = runs.to_pandas()
    fig, axes = plt.subplots(len(datasets), len(families),
                             figsize=(3.6 * len(families), 3.0 * len(datasets)), squeeze=False)  # fmt: skip
    for i, ds in enumerate(datasets):
        for j, fam in enumerate(families):
            ax = axes[i][j]
            o = out_held[(out_held["dataset"] == ds) & (out_held["setting"] == f"{fam}_adamw_out")]
            if not len(o):
                ax.set_axis_off()
                continue
            mine = runs_pd[(runs_pd["dataset"] == ds) & (runs_pd["setting"] == f"{fam}_adamw_out")]
            g = grid_out[(grid_out["dataset"] == ds) & (grid_out["setting"] == f"{fam}_adamw_out")
                         & (grid_out["seed"] == first)]  # fmt: skip
            picked = (mine[mine["seed"] == first]["adamw_lr"].tolist() or [None])[0]
            others = [(lr, sub) for lr, sub in g.groupby("lr")] if len(g) else []
            for k, (lr, sub) in enumerate(r for r in others if r[0] != picked):
                ax.plot(sub["x"], sub["y"], ls="--", lw=0.8, color=RATE_COLORS[k % 4],
                        label=f"rate {lr:g} (seed {first})")  # fmt: skip
            for k, (seed, sub) in enumerate(o.groupby("seed")):
                ax.plot(sub["x"], sub["y"], color=OUT_COLOR, lw=1.2,
                        label="picked rate" if k == 0 else None)  # fmt: skip
                kept = mine[mine["seed"] == seed]["best_epoch"]
                if len(kept):
                    at = sub[sub["x"] == kept.iloc[0]]
                    ax.scatter(at["x"], at["y"], color=OUT_COLOR, marker="o", s=18, zorder=3)
            for k, mse in enumerate(runs_pd[(runs_pd["dataset"] == ds)
                                            & (runs_pd["setting"] == f"{fam}_pil")]["heldout_mse"]):  # fmt: skip
                ax.axhline(mse, color="k", ls=":", lw=1, label="PIL solve" if k == 0 else None)
            ax.set(xlabel="passes over the solve's pairs", ylabel="held-out MSE",
                   title=f"{DATASETS[ds]}: {FAMILY_NAMES[fam]}")  # fmt: skip
            ax.title.set_fontsize(7)
            ax.legend(fontsize=5)
    fig.tight_layout()
    save(fig, out / "gen_adamw_out.pdf", out / "gen_adamw_out.png")
