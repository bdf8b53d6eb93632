"""The scaling study's figures, one per axis, from its summaries (``scaling-figures``).

* width: attention-only's shares against non-embedding parameters per corpus (95 % t interval
  over seeds), every variant's test perplexity on the main corpus, the baseline's validation
  curves per width (overfitting shows as a curve that turns up), and the solve's and AdamW's
  time against width (log-log);
* depth and data: the shares and the perplexities against parameters and training tokens.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

from pillm.paper.figures import save

matplotlib.use("Agg")  # headless: rules run without a display
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

from pillm.lm.scaling_tables import CORPUS_NAMES, VARIANT_COLS  # noqa: E402

SIZE_LABEL = {
    "params": "non-embedding parameters of the baseline",
    "train_tokens": "training tokens",
}


def _axis_points(points: pl.DataFrame, corpus: str, axis: str) -> pl.DataFrame:
    return points.filter((pl.col("corpus") == corpus) & pl.col("axes").str.contains(axis)).sort(
        "params", "train_tokens"
    )


def _shares(ax, points: pl.DataFrame, corpora: list[str], axis: str, size: str) -> None:
    for corpus in corpora:
        sub = _axis_points(points, corpus, axis)
        if not sub.height:
            continue
        for col, style in (("attn_share", "-o"), ("attn_ratio", "--s")):
            ci = sub[f"{col}_ci"].fill_null(0.0) * 100
            ax.errorbar(
                sub[size],
                sub[col] * 100,
                yerr=ci,
                fmt=style,
                ms=3,
                capsize=2,
                label=f"{CORPUS_NAMES.get(corpus, corpus)}: {'loss share' if col == 'attn_share' else 'PPL ratio'}",
            )
    ax.set_xscale("log", base=2)
    ax.set(xlabel=SIZE_LABEL[size], ylabel="attention-only (%)")
    ax.legend(fontsize=6)


def _ppl(ax, points: pl.DataFrame, corpus: str, axis: str, size: str) -> None:
    sub = _axis_points(points, corpus, axis)
    for v, label in VARIANT_COLS:
        if f"{v}_ppl" in sub.columns and sub[f"{v}_ppl"].null_count() < sub.height:
            ax.plot(sub[size], sub[f"{v}_ppl"], "-o", ms=3, label=label.replace("$\\to$", "→"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(
        xlabel=SIZE_LABEL[size],
        ylabel=f"test perplexity ({CORPUS_NAMES.get(corpus, corpus)})",
    )
    ax.legend(fontsize=6)


def _curves(ax, curves: pl.DataFrame, points: pl.DataFrame, corpus: str) -> None:
    width = _axis_points(points, corpus, "width")
    val = curves.filter(
        (pl.col("corpus") == corpus)
        & (pl.col("variant") == "baseline")
        & pl.col("val_loss").is_not_null()
        & pl.col("point").is_in(width["point"].to_list())
    )
    mean = val.group_by("point", "tokens").agg(pl.col("val_loss").mean()).sort("tokens")
    for r in width.iter_rows(named=True):
        c = mean.filter(pl.col("point") == r["point"])
        ax.plot(c["tokens"], c["val_loss"], "-o", lw=1, ms=2, label=f"d={r['d_model']}")
    ax.set(xlabel="training tokens", ylabel="baseline validation loss (nats)")
    ax.legend(fontsize=6)


def _cost(ax, cost: pl.DataFrame) -> None:
    for col, label in (
        ("solve_s", "PIL solve (all FFNs)"),
        ("adamw_s", "AdamW (FFNs only)"),
        ("decompose_s", "solve: decomposition + λ search"),
    ):
        ax.plot(cost["d_model"], cost[col], "-o", ms=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="width d", ylabel="seconds")
    ax.legend(fontsize=6)


def scaling_figures(runs_path: str, main: str, pdfs: list[str], pngs: list[str]) -> None:
    """Write the width, depth and data figures (``pdfs``/``pngs`` in that order) from the
    point, curve and cost summaries beside the run summary ``runs_path``."""
    beside = Path(runs_path).with_name
    points = pl.read_parquet(beside("scaling_points.parquet"))
    curves = pl.read_parquet(beside("scaling_curves.parquet"))
    cost = pl.read_parquet(beside("scaling_cost.parquet"))
    corpora = points["corpus"].unique(maintain_order=True).to_list()
    sns.set_theme(style="whitegrid", context="paper")

    fig, axes = plt.subplots(2, 2, figsize=(9, 6.4))
    _shares(axes[0, 0], points, corpora, "width", "params")
    _ppl(axes[0, 1], points, main, "width", "params")
    _curves(axes[1, 0], curves, points, main)
    _cost(axes[1, 1], cost)
    fig.tight_layout()
    save(fig, pdfs[0], pngs[0])

    for i, (axis, size) in enumerate((("depth", "params"), ("data", "train_tokens")), start=1):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        _shares(axes[0], points, [main], axis, size)
        _ppl(axes[1], points, main, axis, size)
        fig.tight_layout()
        save(fig, pdfs[i], pngs[i])
