"""The SST-2 figure: dev accuracy against fitting time, from the lora summaries."""

from __future__ import annotations

import polars as pl

from pillm.lora.report import GROUPS, METHODS, load_lora


def lora_figure(summary_dir: str, pdf: str, png: str) -> None:
    """Dev accuracy (the split every choice is made on) against fitting time, one panel per
    model group: LoRA's early-stopped run at each learning rate and seed (the chosen rate bold,
    the others faint), the closed-form heads as single points (one per seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from pillm.paper.figures import save

    jobs, curves = load_lora(summary_dir)
    groups = [g for g in GROUPS if g in set(jobs["model_group"].to_list())] or ["none"]
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 2.7), squeeze=False)
    colors = dict(zip(METHODS, sns.color_palette("colorblind", len(METHODS)), strict=True))
    markers = {"pil_lora": "o", "ridge": "s", "pil_adapter": "D", "lora": "^"}
    has_dev = "dev_accuracy" in curves.columns
    for ax, g in zip(axes[0], groups, strict=True):
        sub = jobs.filter(pl.col("model_group") == g)
        labels = [x for x in sub["model_label"].to_list() if x] if sub.height else []
        ax.set_title(labels[0] if labels else "no results", fontsize=8)
        for m, (name, _) in METHODS.items():
            plain = name.replace("\\texttt{peft}", "peft")
            if m == "lora":
                c = curves.filter((pl.col("model_group") == g) & (pl.col("method") == m))
                if not has_dev or c.height == 0:
                    continue
                first = True
                for _, run in c.group_by(["model", "lr"], maintain_order=True):
                    run = run.sort("step")
                    chosen = bool(run["chosen"][0])
                    ax.plot(run["fit_seconds"], 100 * run["dev_accuracy"], "-",
                            marker=markers[m] if chosen else None, ms=2.5,
                            lw=1.1 if chosen else 0.6, alpha=1.0 if chosen else 0.3,
                            color=colors[m], label=plain if chosen and first else None)  # fmt: skip
                    first = first and not chosen
            elif "dev_accuracy" in sub.columns:
                r = sub.filter((pl.col("method") == m) & pl.col("dev_accuracy").is_not_null())
                ax.scatter(r["fit_seconds"], 100 * r["dev_accuracy"], marker=markers[m], s=28,
                           color=colors[m], label=plain, zorder=3)  # fmt: skip
        ax.axhline(50, color="0.6", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # labels on short ranges
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("fitting time (s, log)", fontsize=7)
        ax.set_ylabel("SST-2 dev accuracy (%)", fontsize=7)
        ax.tick_params(which="both", labelsize=6)
        ax.legend(fontsize=5, loc="best")
    save(fig, pdf, png)
