"""The PIL-LoRA vs LoRA figure: SST-2 accuracy against fitting time, from the lora summaries."""

from __future__ import annotations

import polars as pl

from pillm.lora.report import GROUPS, METHODS, load_lora


def lora_figure(summary_dir: str, pdf: str, png: str) -> None:
    """Validation accuracy against fitting time, one panel per model group: LoRA's curve per
    model (evaluations along training), PIL-LoRA and the ridge control as single points."""
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
    markers = {"pil_lora": "o", "ridge": "s", "lora": "^"}
    for ax, g in zip(axes[0], groups, strict=True):
        sub = jobs.filter(pl.col("model_group") == g)
        labels = [x for x in sub["model_label"].to_list() if x] if sub.height else []
        ax.set_title(labels[0] if labels else "no results", fontsize=8)
        for m, (name, _) in METHODS.items():
            plain = name.replace("\\texttt{peft}", "peft")
            if m == "lora":
                c = curves.filter((pl.col("model_group") == g) & (pl.col("method") == m))
                for i, model in enumerate(sorted(set(c["model"].to_list()))):
                    cm = c.filter(pl.col("model") == model).sort("step")
                    ax.plot(cm["fit_seconds"], 100 * cm["accuracy"], "-", marker=markers[m],
                            ms=3, lw=1.1, color=colors[m], label=plain if i == 0 else None)  # fmt: skip
            else:
                r = sub.filter((pl.col("method") == m) & pl.col("accuracy").is_not_null())
                ax.scatter(r["fit_seconds"], 100 * r["accuracy"], marker=markers[m], s=28,
                           color=colors[m], label=plain, zorder=3)  # fmt: skip
        ax.axhline(50, color="0.6", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # labels on short ranges
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("fitting time (s, log)", fontsize=7)
        ax.set_ylabel("SST-2 validation accuracy (%)", fontsize=7)
        ax.tick_params(which="both", labelsize=6)
        ax.legend(fontsize=6, loc="best")
    save(fig, pdf, png)
