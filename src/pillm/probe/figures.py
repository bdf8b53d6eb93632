"""Seaborn figures of the R²_lin probing study (one function per figure).

Every function takes the polars summary it plots and writes a PDF and a PNG through
``pillm.paper.figures.save``; ``probe_figures`` reads the summaries and writes all six
(``FIGURES``); the shared plot helpers are in ``pillm.probe.plotting``. Multi-seed
groups (the pillm baseline) are drawn as the mean over seeds, with a ±1 sd band where a band is
drawn. Blocks are numbered from 0. An empty input still gives a (labelled, empty) figure, so the
pipeline's outputs exist in every configuration.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: rules run without a display
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pillm.data.sources import CORPUS_NAMES
from pillm.paper.figures import save  # noqa: E402
from pillm.paper.latex import mean_std  # noqa: E402
from pillm.probe.plan import FIGURES  # noqa: E402
from pillm.probe.plotting import (  # noqa: E402
    _empty,
    _grid,
    _labels,
    _on,
    _palette,
    _per_model_blocks,
    _seed_mean,
    _theme,
)
from pillm.probe.summary import (
    is_proxy,
    load_summaries,
    main_corpus,
    order_corpora,
    order_groups,
    pearson,
)

R2 = r"$R^2_{\mathrm{lin}}$"


def r2_depth(df: pl.DataFrame, pdf: str, png: str, main: str | None = None) -> None:
    """Per model group: R²_lin per block (line, left axis) and the change of the swap metric when
    that block is replaced by its linear fit (bars) or its low-rank truncation (crosses, right
    axis), on the main corpus."""
    d, labels, fig, axes = _per_model_blocks(df, main, pdf, png)
    if not labels:
        return
    cols = ["r2_lin", "delta_linear", "delta_lowrank"]
    c_r2, c_lin, c_lr = sns.color_palette("colorblind", 3)
    for ax, (g, label) in zip(axes, labels.items(), strict=False):
        sub = d.filter(pl.col("model_group") == g)
        b = _seed_mean(sub, ["layer"], cols).to_dict(as_series=False)
        x = b["layer"]
        lo = [m - s for m, s in zip(b["r2_lin"], b["r2_lin_sd"], strict=True)]
        hi = [m + s for m, s in zip(b["r2_lin"], b["r2_lin_sd"], strict=True)]
        n_models = sub["model"].n_unique()
        has_swap = any(v is not None for v in b["delta_linear"])
        if has_swap:
            ax2 = ax.twinx()
            ax2.grid(False)
            lin = [0.0 if v is None else v for v in b["delta_linear"]]
            err = b["delta_linear_sd"] if n_models > 1 else None
            ax2.bar(x, lin, width=0.7, color=c_lin, alpha=0.45, yerr=err, ecolor="0.3")
            lr = [(xi, v) for xi, v in zip(x, b["delta_lowrank"], strict=True) if v is not None]
            if lr:
                ax2.plot([p[0] for p in lr], [p[1] for p in lr], "x", color=c_lr, ms=5, mew=1.2)
            proxy = is_proxy(sub["kind"][0], sub["swap_metric"][0])
            if not proxy:
                ax2.set_yscale("symlog", linthresh=1.0)
            ax2.set_ylabel(r"$\Delta(1-\cos)$ (proxy)" if proxy else r"$\Delta$PPL", fontsize=7)
            ax2.tick_params(labelsize=6)
            ax.set_zorder(ax2.get_zorder() + 1)  # the R² line above the bars
            ax.patch.set_visible(False)
        if n_models > 1:
            ax.fill_between(x, lo, hi, color=c_r2, alpha=0.25, lw=0)
        ax.plot(x, b["r2_lin"], "o-", color=c_r2, ms=3, lw=1.2)
        ymin = min([v for v in lo if v is not None] + [0.0])
        ax.set_ylim(ymin - 0.03, 1.03)
        ax.set_title(label + (f" ({n_models} seeds)" if n_models > 1 else ""), fontsize=8)
        ax.set_xlabel("block", fontsize=7)
        ax.set_ylabel(R2, fontsize=7)
        ax.tick_params(labelsize=6)
        if len(x) <= 12:
            ax.set_xticks(x)
        if not has_swap:
            ax.text(0.98, 0.04, "no swaps", transform=ax.transAxes, ha="right", fontsize=6)
    handles = [
        Line2D([], [], color=c_r2, marker="o", ms=3, label=f"{R2} (held out)"),
        Patch(color=c_lin, alpha=0.45, label=r"$\Delta$ swap: linear fit"),
        Line2D([], [], color=c_lr, marker="x", ls="none", label=r"$\Delta$ swap: low-rank fit"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, pdf, png)


def bilinear(df: pl.DataFrame, pdf: str, png: str, main: str | None = None) -> None:
    """Per block: residual nonlinearity 1 - R²_lin against the held-out gain of the bilinear
    probe; colour = model group, Pearson r within each group in the legend (several seeds: within
    each seed, mean over seeds)."""
    main = main_corpus(df, main or "wikitext2")
    d = _on(df, main).filter(pl.col("bilinear_gain").is_not_null() & pl.col("r2_lin").is_not_null())
    d = d.with_columns((1 - pl.col("r2_lin")).alias("resid"))
    _theme()
    fig, ax = plt.subplots(figsize=(4.4, 3.0))
    if d.height == 0:
        _empty(ax, "bilinear probes")
        save(fig, pdf, png)
        return
    labels = _labels(d)
    names = {}
    for g, lab in labels.items():
        s = d.filter(pl.col("model_group") == g)
        per_seed = [
            pearson(m["resid"].to_list(), m["bilinear_gain"].to_list())
            for m in s.partition_by("model", maintain_order=True)
        ]
        r = mean_std(per_seed)[0]
        names[g] = f"{lab} (r = {r:.2f})" if r is not None else f"{lab} (r: n/a)"
    d = d.with_columns(pl.col("model_group").replace_strict(names).alias("model"))
    pal = {names[g]: c for g, c in zip(labels, _palette(labels).values(), strict=True)}
    sns.scatterplot(
        data=d.to_pandas(),
        x="resid",
        y="bilinear_gain",
        hue="model",
        hue_order=list(names.values()),
        palette=pal,
        s=22,
        ax=ax,
    )
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_title("Pearson r within each model (legend)", fontsize=8)
    ax.set(xlabel=r"$1-R^2_{\mathrm{lin}}$ (held out)", ylabel="bilinear probe gain in $R^2$")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    save(fig, pdf, png)


def feature_median(df: pl.DataFrame, pdf: str, png: str, main: str | None = None) -> None:
    """Per block: global R²_lin against the median per-coordinate R²; point size ∝ map rank
    (the effective rank of the fitted map on a whitened input, ``pillm.probe.fit.map_rank``);
    the diagonal marks equality."""
    main = main_corpus(df, main or "wikitext2")
    d = _on(df, main).filter(
        pl.col("r2_lin").is_not_null() & pl.col("r2_feature_median").is_not_null()
    )
    _theme()
    fig, ax = plt.subplots(figsize=(4.4, 3.0))
    if d.height == 0:
        _empty(ax, "probe results")
        save(fig, pdf, png)
        return
    labels = _labels(d)
    d = d.with_columns(pl.col("model_group").replace_strict(labels).alias("model"))
    sns.scatterplot(
        data=d.to_pandas(),
        x="r2_lin",
        y="r2_feature_median",
        hue="model",
        hue_order=list(labels.values()),
        palette=_palette(labels),
        size="map_rank",
        sizes=(12, 160),
        alpha=0.75,
        ax=ax,
    )
    lo = min(0.0, float(d["r2_lin"].min()), float(d["r2_feature_median"].min()))
    ax.plot([lo, 1], [lo, 1], color="0.3", ls="--", lw=0.8)
    ax.set(xlabel=f"global {R2} (held out)", ylabel="median per-coordinate $R^2$")
    handles, texts = ax.get_legend_handles_labels()
    cut = texts.index("map_rank") if "map_rank" in texts else len(texts)
    models = [(h, t) for h, t in zip(handles[:cut], texts[:cut], strict=True) if t != "model"]
    sizes = list(zip(handles[cut + 1 :], texts[cut + 1 :], strict=True))
    if sizes:  # the upper left lies above the diagonal, where blocks are rare
        size_legend = ax.legend(
            [h for h, _ in sizes],
            [t for _, t in sizes],
            title="map rank",
            fontsize=6,
            title_fontsize=6,
            loc="upper left",
        )
        ax.add_artist(size_legend)
    ax.legend(
        [h for h, _ in models],
        [t for _, t in models],
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=2,
        frameon=False,
    )
    save(fig, pdf, png)


def corpora(df: pl.DataFrame, pdf: str, png: str) -> None:
    """R²_lin against relative depth; colour = model group, line style = corpus (seed means)."""
    d = df.filter(pl.col("r2_lin").is_not_null())
    _theme()
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    if d.height == 0:
        _empty(ax, "probe results")
        save(fig, pdf, png)
        return
    labels = _labels(d)
    order = order_corpora(d["corpus"].to_list())
    names = {c: CORPUS_NAMES.get(c, c) for c in order}
    m = _seed_mean(d, ["model_group", "corpus", "layer"], ["r2_lin", "depth"]).with_columns(
        pl.col("model_group").replace_strict(labels).alias("model"),
        pl.col("corpus").replace_strict(names),
    )
    sns.lineplot(
        data=m.to_pandas(),
        x="depth",
        y="r2_lin",
        hue="model",
        hue_order=list(labels.values()),
        palette=_palette(labels),
        style="corpus",
        style_order=list(names.values()),
        markers=True,
        dashes=True,
        markersize=4,
        errorbar=None,
        ax=ax,
    )
    ax.set(xlabel="relative depth (block / (blocks - 1))", ylabel=f"{R2} (held out)")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, pdf, png)


def gradient(dg: pl.DataFrame, pdf: str, png: str) -> None:
    """Held-out R² of the gradient-trained linear map against AdamW steps (log scale), one
    panel per model group and corpus, colour = block; dashed: the closed-form fit on the same
    rows. Steps <= 0 (the zero initialisation) are not drawn on the log axis."""
    d = dg.filter((pl.col("step") > 0) & pl.col("r2_heldout").is_not_null())
    panels = d.select("model_group", "corpus").unique().to_dicts() if d.height else []
    rank = {g: i for i, g in enumerate(order_groups([p["model_group"] for p in panels]))}
    crank = {c: i for i, c in enumerate(order_corpora([p["corpus"] for p in panels]))}
    panels.sort(key=lambda p: (rank[p["model_group"]], crank[p["corpus"]]))
    _theme()
    fig, axes = _grid(len(panels) or 1, 2.6, 2.2)
    if not panels:
        _empty(axes[0], "gradient probes")
        save(fig, pdf, png)
        return
    labels = _labels(d)
    several_corpora = len({p["corpus"] for p in panels}) > 1
    for ax, p in zip(axes, panels, strict=False):
        sub = d.filter(
            (pl.col("model_group") == p["model_group"]) & (pl.col("corpus") == p["corpus"])
        )
        curve = _seed_mean(sub, ["layer", "step"], ["r2_heldout"])
        closed = _seed_mean(sub, ["layer"], ["closed_r2"])
        layers = closed["layer"].to_list()
        colors = sns.color_palette("viridis", max(len(layers), 1))
        for color, layer, ref in zip(colors, layers, closed["closed_r2"].to_list(), strict=True):
            c = curve.filter(pl.col("layer") == layer)
            ax.plot(c["step"], c["r2_heldout"], "-", color=color, lw=1.2, label=f"block {layer}")
            if ref is not None:
                ax.axhline(ref, color=color, ls="--", lw=0.9)
        vals = sub["r2_heldout"].to_list() + closed["closed_r2"].to_list()
        vals = [v for v in vals if v is not None]
        ax.set_ylim(max(min(vals), -0.25) - 0.03, 1.03)
        ax.set_xscale("log")
        title = labels[p["model_group"]]
        if several_corpora:
            title += f", {CORPUS_NAMES.get(p['corpus'], p['corpus'])}"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("AdamW steps", fontsize=7)
        ax.set_ylabel(r"held-out $R^2$", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, loc="lower right")
    fig.legend(
        handles=[
            Line2D([], [], color="0.3", ls="-", label="gradient-trained linear map"),
            Line2D([], [], color="0.3", ls="--", label="closed form, same rows"),
        ],
        loc="lower center",
        ncol=2,
        fontsize=7,
        bbox_to_anchor=(0.5, -0.02),
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, pdf, png)


def masks(df: pl.DataFrame, pdf: str, png: str, main: str | None = None) -> None:
    """Per model group: R²_lin per block on the rows the row policy keeps and on all rows (left
    axis; error bars: 95 % bootstrap interval over fitting and held-out windows, the map refitted
    on each resample, for one model, ±1 sd over seeds for several), and the share of the
    held-out output variance carried by the excluded rows and by the top-k output coordinates
    (bars, right axis), on the main corpus."""
    d, labels, fig, axes = _per_model_blocks(df, main, pdf, png)
    if not labels:
        return
    cols = ["r2_lin", "r2_lin_all", "r2_lin_lo", "r2_lin_hi", "r2_lin_all_lo", "r2_lin_all_hi"]
    cols += ["excluded_share", "outlier_share"]
    ks = sorted({int(v) for v in d["outlier_k"].to_list() if v is not None})
    k = "/".join(map(str, ks)) or "k"
    c_kept, c_all, c_excl, c_out = sns.color_palette("colorblind", 4)
    for ax, (g, label) in zip(axes, labels.items(), strict=False):
        sub = d.filter(pl.col("model_group") == g)
        b = _seed_mean(sub, ["layer"], cols).to_dict(as_series=False)
        x = b["layer"]
        n_models = sub["model"].n_unique()
        ax2 = ax.twinx()
        ax2.grid(False)
        w = 0.38
        for off, col, color in (
            (-w / 2, "excluded_share", c_excl),
            (w / 2, "outlier_share", c_out),
        ):
            vals = [0.0 if v is None else v for v in b[col]]
            ax2.bar([xi + off for xi in x], vals, width=w, color=color, alpha=0.35)
        ax2.set_ylim(0, 1.0)
        ax2.set_ylabel("share of held-out variance", fontsize=7)
        ax2.tick_params(labelsize=6)
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
        for col, color, style in (("r2_lin", c_kept, "o-"), ("r2_lin_all", c_all, "s--")):
            mid = b[col]
            if n_models > 1:
                err = [b[f"{col}_sd"], b[f"{col}_sd"]]
            else:
                lo = [
                    m - v if None not in (m, v) else 0.0
                    for m, v in zip(mid, b[f"{col}_lo"], strict=True)
                ]
                hi = [
                    v - m if None not in (m, v) else 0.0
                    for m, v in zip(mid, b[f"{col}_hi"], strict=True)
                ]
                err = [lo, hi]
            ax.errorbar(x, mid, yerr=err, fmt=style, color=color, ms=3, lw=1.1, capsize=1.5)
        vals = [v for v in b["r2_lin"] + b["r2_lin_all"] if v is not None]
        ax.set_ylim(min(vals + [0.0]) - 0.03, 1.03)
        ax.set_title(label + (f" ({n_models} seeds)" if n_models > 1 else ""), fontsize=8)
        ax.set_xlabel("block", fontsize=7)
        ax.set_ylabel(R2, fontsize=7)
        ax.tick_params(labelsize=6)
        if len(x) <= 12:
            ax.set_xticks(x)
    handles = [
        Line2D([], [], color=c_kept, marker="o", ms=3, label=f"{R2}: kept rows"),
        Line2D([], [], color=c_all, marker="s", ms=3, ls="--", label=f"{R2}: all rows"),
        Patch(color=c_excl, alpha=0.35, label="share: excluded rows"),
        Patch(color=c_out, alpha=0.35, label=f"share: top-{k} coordinates"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, pdf, png)


def probe_figures(summary_dir: str, out_dir: str, main: str | None = None) -> list[str]:
    """Write every probe figure as ``out_dir/<name>.pdf`` and ``.png``; return the paths."""
    probe, grad, _jobs = load_summaries(summary_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {n: (str(out / f"{n}.pdf"), str(out / f"{n}.png")) for n in FIGURES}
    r2_depth(probe, *paths["probe_r2_depth"], main=main)
    bilinear(probe, *paths["probe_bilinear"], main=main)
    feature_median(probe, *paths["probe_feature_median"], main=main)
    corpora(probe, *paths["probe_corpora"])
    gradient(grad, *paths["probe_gradient"])
    masks(probe, *paths["probe_masks"], main=main)
    return [p for n in FIGURES for p in paths[n]]
