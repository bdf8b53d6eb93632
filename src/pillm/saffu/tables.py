"""The SAFFU tables (saffu.tex, saffu_sizes.tex, saffu_ablation.tex) and saffu_numbers.tex:
layout, captions and rendering through the report contract (pillm.paper.report), their rows
and macros from pillm.saffu.report."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.paper.latex import MISSING, fmt_num, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.saffu.report import SaffuReport

SAFFU_TABLES = {  # name -> (label, column spec, header)
    "saffu": (
        "tab:saffu",
        "lp{0.27\\linewidth}rrrrrr",
        ["Model", "Optimises", "Trained (M)", "Solved (M)", "Solve (s)", "Grad. (s)",
         "PPL $\\downarrow$", "BPB $\\downarrow$"],
    ),
    "saffu_sizes": (
        "tab:saffu-sizes",
        "rrrrrrrrrrr",
        ["Train \\%", "Tokens (k)", "Kneser-Ney", "Explicit", "Warm", "Cold", "$\\alpha$",
         "lr warm", "lr cold", "Step warm", "Step cold"],
    ),
    "saffu_ablation": (
        "tab:saffu-ablation",
        "llrrrrrrrr",
        ["Setting", "Agg.", "$b$", "$r$", "Inputs", "Params (M)", "Explicit", "Warm", "Cold",
         "Seeds"],
    ),
}  # fmt: skip


def captions(rep: SaffuReport, policy: str) -> dict[str, str]:
    main = rep.describe(rep.main)
    seeds = len(rep.params["seeds"])
    spread = "mean $\\pm$ 95\\,\\% $t$ half-width over seeds" if seeds > 1 else "one seed"
    training = (
        "AdamW at the rate of the grid with the lowest held-out loss (chosen per start at the "
        "first seed), stopped when the held-out loss has not improved for "
        f"{rep.params['patience']} evaluations, the best point kept"
    )
    return {
        "saffu": (
            "SAFFU explicit solution (our re-implementation) beside an interpolated Kneser-Ney "
            "n-gram model, PIL's ridge solve and the GPT baseline, test split "
            f"({tex_escape(policy)}), full train split. SAFFU rows: setting {main}, inputs the "
            f"{fmt_num(rep.params['top_types'], 0)} most frequent train types plus an ``other'' "
            f"bucket, outputs the full vocabulary; warm and cold start: {training}. PPL: {spread}. "
            "Trained/solved: parameters set by gradient steps / by the closed form. Grad.: AdamW "
            "time of the chosen rate's run (the first seed's rate search takes longer; Kneser-Ney: "
            "fit and order choice on one CPU core under Solve)."
        ),
        "saffu_sizes": (
            f"SAFFU by train size (setting {main}): a seeded contiguous window of the train split "
            "(the same window for every model of one seed), test perplexity of the Kneser-Ney "
            "model, the explicit solution, the warm and the cold start; learning rates: the "
            "first seed's choice; $\\alpha$ and the step of the best held-out loss: mean over "
            f"seeds. {training[0].upper() + training[1:]}. "
            f"PPL: {spread}."
        ),
        "saffu_ablation": (
            "SAFFU aggregation and context ablation, full train split: test perplexity of the "
            "explicit solution alone, after AdamW from it (warm) and after AdamW from the "
            "log-unigram start (cold); $b$: block size (uniform bag), $r$: radius (weights "
            "$1/k$); mean $\\pm$ 95\\,\\% $t$ half-width where a setting has several seeds."
        ),
    }


def render_saffu_tables(
    summary_dir: str, lm_summary: str | None, params: dict, template_dir: str,
    tables_dir: str, numbers_path: str,
) -> None:  # fmt: skip
    """Write saffu.tex, saffu_sizes.tex and saffu_ablation.tex into ``tables_dir`` and the
    Saffu* macros to ``numbers_path``, through the report contract."""
    d = Path(summary_dir)
    summary = pl.read_parquet(d / "saffu.parquet")
    lm = pl.read_parquet(lm_summary) if lm_summary and Path(lm_summary).is_file() else None
    rep = SaffuReport(summary, lm, params)
    policy = summary["data_policy"][0] if summary.height else MISSING
    caps = captions(rep, policy)
    rows = {"saffu": rep.main_rows(), "saffu_sizes": rep.size_rows(),
            "saffu_ablation": rep.ablation_rows()}  # fmt: skip
    tables = {
        Path(tables_dir) / f"{name}.tex": Table(caps[name], label, colspec, header, rows[name])
        for name, (label, colspec, header) in SAFFU_TABLES.items()
    }
    render_report(tables, rep.numbers(), template_dir, numbers_path,
                  "pillm.saffu.report from the SAFFU and LM summaries", prefix="Saffu")  # fmt: skip
