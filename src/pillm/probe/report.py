"""Tables and macros of the R²_lin probing study (how linear is each trained FFN block?).

``aggregate_probe`` stacks the probe jobs into the summaries; ``render_probe_tables`` reads them
(``pillm.probe.summary``), derives every row (``pillm.probe.rows``) and macro
(``pillm.probe.macros``), and writes them through the shared report contract
(``pillm.paper.report``). The table definitions (header, caption, layout) are here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.latex import MISSING
from pillm.paper.report import render_report
from pillm.paper.table import LongTable, Table
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet
from pillm.probe.correlations import claim_interval_rows
from pillm.probe.macros import probe_macros
from pillm.probe.rows import FEW, ProbeReport
from pillm.probe.summary import (
    PROBE_SCHEMA,
    PROXY,
    conform,
    corpus_name,
    load_summaries,
    main_corpus,
    row_policy_words,
)


def _stack(*lines: str) -> str:
    """A header cell of several centred lines (keeps wide tables narrow)."""
    return "\\shortstack{" + "\\\\{}".join(lines) + "}"  # {}: a line may start with [


def probe_tables(rep: ProbeReport) -> dict[str, dict[str, Any]]:
    """name -> template context (caption, label, colspec, header, rows) of the single tables."""
    main = corpus_name(rep.main) if rep.main else MISSING
    r = rep.params.get("bilinear_rank", MISSING)
    f = rep.params.get("low_rank_factor", MISSING)
    policy = row_policy_words(rep.params.get("rows"))
    few = rep.min_blocks
    proxy = (
        f"{PROXY}: encoder without an LM head; the swap metric is the proxy $1-\\cos$ between the "
        "mean-pooled final hidden states of the swapped and the intact model (mean over windows), "
        "not a perplexity."
    )
    seeds = (
        "Multi-seed models: per-block values averaged over seeds first; $\\pm$ is the sample std "
        "over seeds."
    )
    partial = rep.partial_corpora()
    only = "".join(
        f" {rep.label(g)}: {', '.join(corpus_name(c) for c in cs)} only "
        "(probe.cross\\_corpus\\_models)."
        for g, cs in partial.items()
    )
    return {
        "probe_summary": {
            "label": "tab:probe-summary",
            "colspec": "lrrrrrrrrrrrr",
            "header": [
                "Model",
                "$L$",
                "$d$",
                _stack("$\\Rlin$ mean", "[min, max]"),
                _stack("$\\Rlin$", "all rows"),
                _stack("Feat.", "med."),
                _stack("Bilin.", "gain"),
                "$r$",
                _stack("Lin.\\ swap", "best"),
                _stack("Lin.\\ swap", "worst"),
                _stack("Low-rank", "best"),
                _stack("FFN/", "lin."),
                _stack("FFN/", "low-rank"),
            ],
            "caption": f"Linear recoverability of the FFN blocks of every probed model on {main}. "
            "$L$: FFN blocks; $d$: FFN input width. $\\Rlin$: held-out $R^2$ of the closed-form "
            f"affine fit on the rows the row policy keeps (it leaves out {policy}), "
            "mean over blocks with the lowest and "
            "highest block; all rows: the same with every row fitted and scored (mean over "
            "blocks). Feat.\\ med.: mean "
            "over blocks of the median per-coordinate held-out $R^2$. Bilin.\\ gain: mean held-out "
            f"$R^2$ added by the rank-{r} bilinear probe; $r$: Pearson correlation between "
            "$1-\\Rlin$ and that gain over the blocks of the model (several seeds: within "
            f"each seed, mean over seeds; {FEW}: fewer than {few} blocks per model, or an "
            "interval as wide as $[-1,1]$, too few blocks for a direction). Swap columns: "
            "change of the "
            "metric when one block is replaced by its linear fit (best and worst block) or by the "
            "rank-$k$ truncation of that fit (best block), block index (from 0) in parentheses; "
            "$\\Delta\\PPL$ against the intact model for causal models. FFN/lin., FFN/low-rank: "
            f"parameters of the FFN block over those of its replacement ($k$ targets about {f}$"
            f"\\times$ fewer weights than the dense map). {proxy} {seeds} `--': not measured.",
        },
        "probe_corpora": {
            "label": "tab:probe-corpora",
            "colspec": "llrrrrrrr",
            "header": [
                "Model",
                "Corpus",
                _stack("Held-out", "rows"),
                _stack("$\\Rlin$", "mean"),
                _stack("$\\Rlin$ min", "(block)"),
                _stack("Bilin.", "gain"),
                "Intact",
                _stack("Mean lin.", "swap $\\Delta$"),
                _stack("Max $|\\Delta\\Rlin|$", "(block)"),
            ],
            "caption": "Linear recoverability on each corpus. Held-out rows: mean per block. "
            "Intact: perplexity of the unmodified model on the corpus's swap windows; mean lin.\\ "
            "swap $\\Delta$: mean over blocks of the change when one block at a time is replaced "
            "by its linear fit (`--' where no swaps were run on that corpus). Last column: the "
            "largest difference, over blocks, between the highest and lowest $\\Rlin$ of a block "
            f"across corpora, with its block (from 0).{only} {proxy} {seeds}",
        },
        "probe_gradient": {
            "label": "tab:probe-gradient",
            "colspec": "llrrrrrrr",
            "header": [
                "Model",
                "Corpus",
                "Block",
                _stack("Closed", "form"),
                _stack("Gradient", "(last step)"),
                "Gap",
                "Steps",
                "Rows",
                "LR",
            ],
            "caption": "Gradient-trained versus closed-form linear maps for the probed blocks: "
            "held-out $R^2$ of the least-squares map fitted in closed form on the same fitting "
            "rows, of the map trained by AdamW from zero initialisation after its last step, and "
            "their difference (closed form minus gradient). Steps, rows and learning rate as "
            f"recorded by the runs. {seeds}",
        },
        "probe_cost": {
            "label": "tab:probe-cost",
            "colspec": "lllrrrrrr",
            "header": [
                "Model",
                "Corpus",
                "Device",
                "Rows",
                "Rows/s",
                "Load (s)",
                _stack("Capture", "+fit (s)"),
                _stack("Swaps", "(s)"),
                _stack("Peak mem.", "(MB)"),
            ],
            "caption": "Cost of each probing job (one model on one corpus): token rows captured "
            "per block, rows per second of the capture-and-fit phase (both passes over the rows "
            "and all solves), wall time to load the model, to capture and fit every block, and to "
            "run the block swaps (0 or `--' where none were run), and peak memory as the job "
            "recorded it (allocated GPU memory on a GPU, resident set size on a CPU).",
        },
    }


def render_probe_tables(
    summary_dir: str, params: dict, template_dir: str, tables_dir: str, numbers_path: str
) -> None:
    """Write probe_{summary,corpora,gradient,blocks,masks,cost}.tex into ``tables_dir`` and the
    probe macros to ``numbers_path``, through the report contract."""
    probe, gradient, jobs = load_summaries(summary_dir)
    rep = ProbeReport(probe, gradient, jobs, params)
    rows = {
        "probe_summary": rep.summary_rows(),
        "probe_corpora": rep.corpora_rows(),
        "probe_gradient": rep.gradient_rows(),
        "probe_cost": rep.cost_rows(),
    }
    tables: dict[Path, Table | LongTable] = {
        Path(tables_dir) / f"{name}.tex": Table(rows=rows[name], **ctx)
        for name, ctx in probe_tables(rep).items()
    }
    header = [
        "Block",
        "$\\Rlin$",
        _stack("Feat.", "med."),
        _stack("Input", "cond."),
        _stack("Map", "rank"),
        _stack("Bilin.", "gain"),
        "$\\kappa$",
        "Solver",
        _stack("Lin.\\ swap", "$\\Delta$"),
        _stack("Low-rank", "$\\Delta$"),
        "$k$",
    ]
    blocks = [
        Table(t["caption"], t["label"], "rrrrrrrlrrr", header, t["rows"], "!htbp", "scriptsize")
        for t in rep.block_tables()
    ]
    tables[Path(tables_dir) / "probe_blocks.tex"] = LongTable(
        blocks,
        "pillm.probe.report from the probe summaries",
        "No per-block probe results in this build.",
    )
    k = rep.params.get("outlier_features", "k")
    masks_header = [
        "Block",
        _stack("$\\Rlin$", "kept rows"),
        _stack("$\\Rlin$ w/o", "massive"),
        _stack("$\\Rlin$", "all rows"),
        _stack("Excl.", "share"),
        _stack(f"Top-{k}", "share"),
        _stack("$\\Rlin$ w/o", f"top-{k}"),
        _stack(f"Top-{k} share", "all rows"),
        _stack(f"$\\Rlin$ w/o top-{k}", "all rows"),
        _stack("Feat.", "med."),
    ]
    masks = [
        Table(
            t["caption"], t["label"], "rlrlrrrrrr", masks_header, t["rows"], "!htbp", "scriptsize"
        )  # fmt: skip
        for t in rep.mask_tables()
    ]
    tables[Path(tables_dir) / "probe_masks.tex"] = LongTable(
        masks,
        "pillm.probe.report from the probe summaries",
        "No per-block probe results in this build.",
    )
    render_report(tables, probe_macros(rep), template_dir, numbers_path,
                  "pillm.probe.report from the probe summaries", prefix="Probe")  # fmt: skip


def gradient_trained(blocks: pl.DataFrame, grads: pl.DataFrame, gain: float) -> pl.DataFrame:
    """``blocks`` with, per block that has a gradient-trained map, ``grad_r2_start`` (the
    zero-initialised map's held-out R² at step 0) and ``grad_trained``: 1.0 when its held-out
    R² at the last step lies ``gain`` or more above that (a NaN: 0.0). The map's run records no
    training loss; its held-out R² is its MSE in units of the output variance, so the rise is
    the loss's fall on that scale (``probe.gradient.trained_gain``)."""
    if grads.is_empty():
        return blocks.with_columns(grad_r2_start=pl.lit(None, pl.Float64),
                                   grad_trained=pl.lit(None, pl.Float64))  # fmt: skip
    keys = ["model", "corpus", "layer"]
    rise = pl.col("_end") - pl.col("grad_r2_start")
    ends = (
        grads.sort("step")
        .group_by(keys)
        .agg(
            pl.col("r2_heldout").first().alias("grad_r2_start"),
            pl.col("r2_heldout").last().alias("_end"),
        )
        # polars orders NaN above every number: a NaN rise is not a rise
        .with_columns(grad_trained=((rise >= gain) & rise.is_not_nan()).fill_null(False))
        .with_columns(pl.col("grad_trained").cast(pl.Float64))
        .drop("_end")
    )
    return blocks.join(ends, on=keys, how="left")


def aggregate_probe(
    block_paths: list[str],
    gradient_paths: list[str],
    metrics_paths: list[str],
    out_dir: str,
    params: dict,
    claims: str,
) -> None:
    """Probe jobs -> ``probe.parquet`` (one row per model x corpus x block), ``probe_gradient``
    (gradient-trained map curves), ``probe_jobs`` (one row per job: cost and provenance) and the
    study's claim frame ``claims`` (``pillm.probe.correlations``: per model, the swap
    correlation of R²_lin on the kept rows minus that on all rows, on the main corpus, or the
    reason it is not evaluated).

    ``params``: {"main_corpus": the first swap corpus, "bootstrap_resamples": over blocks,
    "min_blocks": the fewest blocks per model a correlation's direction needs, "trained_gain":
    the held-out R² rise that makes a gradient-trained map trained (``gradient_trained``)}."""
    out = Path(out_dir)
    blocks = concat_parquet(block_paths)
    blocks = blocks.with_columns(pl.col("seed").cast(pl.Int64)).sort("model", "corpus", "layer")
    grads = concat_parquet(gradient_paths)
    blocks = gradient_trained(blocks, grads, float(params["trained_gain"]))
    write_parquet(blocks, out / "probe.parquet")
    summary = conform(blocks, PROBE_SCHEMA)
    main = main_corpus(summary, params.get("main_corpus"))
    rows = claim_interval_rows(summary, main, int(params["bootstrap_resamples"]),
                               int(params["min_blocks"]))  # fmt: skip
    write_claim_frame(claims, interval_rows=rows)
    write_parquet(grads.sort("model", "corpus", "layer", "step"), out / "probe_gradient.parquet")
    index = ["variant", "corpus", "model_group", "model_label", "device", "device_name", "git_rev"]
    jobs = pivot_records(metrics_paths, index).rename({"variant": "model"})
    write_parquet(jobs.sort("model", "corpus"), out / "probe_jobs.parquet")
