"""The scaling study's tables (``pillm.paper.table.Table``), built from its summaries; numbers
are formatted here, the shared templates only lay them out."""

from __future__ import annotations

from typing import Any

import polars as pl

from pillm.data.sources import CORPUS_NAMES
from pillm.lm.config import ScalingReportParams
from pillm.lm.scaling_summary import PAIRS, ordered_axes
from pillm.paper.latex import MISSING, count_of, fmt_num, fmt_sci, tex_escape
from pillm.paper.table import Table
from pillm.paper.verdicts import HOLDS, INDISTINGUISHABLE, ONE_SEED, OPPONENT_UNTRAINED, REVERSED

VARIANT_COLS = (
    ("baseline", "Full"),
    ("attn_only", "Attn"),
    ("ffn_only", "FFN"),
    ("pil_then_attn", "PIL$\\to$Attn"),
    ("frozen_ffn_attn", "Frozen"),
)
MEASURE_NAMES = {"attn_share": "loss share", "attn_ratio": "PPL ratio"}
AXIS_NAMES = {"width": "width $d$", "depth": "depth $L$", "data": "train tokens"}
# a paired comparison's cell: which arm has the lower test PPL, or '=' within noise
PAIR_MARK = {
    HOLDS: "lower",
    REVERSED: "higher",
    INDISTINGUISHABLE: "$\\approx$",
    ONE_SEED: "1 seed",
    OPPONENT_UNTRAINED: "untrained",
}


def _thousands(n: int) -> str:
    return f"{n:,}".replace(",", "{,}")


def corpus_name(corpus: str) -> str:
    return CORPUS_NAMES.get(corpus, tex_escape(corpus))


def _pm(mean: float | None, half: float | None, digits: int = 1, scale: float = 1.0) -> str:
    if mean is None:
        return MISSING
    text = fmt_num(scale * mean, digits)
    return text if half is None else f"{text}$\\pm${fmt_num(scale * half, digits)}"


def _size(r: dict[str, Any]) -> str:
    return f"{r['d_model']} / {r['n_layer']} / {r['pct']}\\,\\%"


def _ordered(points: pl.DataFrame, cfg: ScalingReportParams) -> list[Any]:
    """Point rows in axis order (main corpus first; width, depth, data; the base point once),
    each block after the first headed by a midrule."""
    out: list[Any] = []
    seen = set()
    for corpus, axis, names in ordered_axes({"axes": cfg.axes, "main": cfg.main}):
        block = [p for p in names if (corpus, p) not in seen]
        seen |= {(corpus, p) for p in block}
        if block:
            if out:
                out.append("midrule")
            out += [(corpus, axis, p) for p in block]
    return out


def _row(points: pl.DataFrame, corpus: str, point: str) -> dict[str, Any]:
    return points.filter((pl.col("corpus") == corpus) & (pl.col("point") == point)).row(
        0, named=True
    )


def points_table(points: pl.DataFrame, cfg: ScalingReportParams) -> Table:
    rows: list[list[str] | str] = []
    for item in _ordered(points, cfg):
        if item == "midrule":
            rows.append(item)
            continue
        corpus, axis, point = item
        r = _row(points, corpus, point)
        cells = [corpus_name(corpus), axis, _size(r), fmt_num(r["params"] / 1e6, 2)]
        cells += [_pm(r.get(f"{v}_ppl"), None, 1) for v, _ in VARIANT_COLS]
        cells += [
            _pm(r["attn_ratio"], r["attn_ratio_ci"], 1, 100),
            _pm(r["attn_share"], r["attn_share_ci"], 1, 100),
        ]
        cells += [
            PAIR_MARK.get(r[f"{name}_verdict"], tex_escape(r[f"{name}_verdict"]))
            for name, _, _ in PAIRS
        ]
        rows.append(cells)
    n = len(cfg.seeds)
    caption = (
        "Scaling points: width $d$ / depth $L$ / share of the train split, non-embedding "
        "parameters of the baseline (M), test perplexity of each variant (mean over "
        f"{count_of(n, 'seed')}; -- where a corpus does not run the variant), attention-only's PPL ratio "
        "$\\PPL_{\\mathrm{full}}/\\PPL_{\\mathrm{attn}}$ and loss share (\\%, mean $\\pm$ 95\\,\\% "
        "$t$ half-width over seeds), and two paired comparisons of test perplexity seed by seed: "
        "FFN-only against attention-only and PIL-then-attention against attention over a "
        "frozen random FFN of standard initialisation, which does not isolate the solve (the "
        "LM study's random-output control does, Section~\\ref{sec:strategy-results}) ('lower': "
        "the first arm is lower with a 95\\,\\% interval that excludes zero; "
        "$\\approx$: indistinguishable; untrained: not compared, a gradient-trained arm's "
        "training loss fell by less than the declared margin at a seed). Every learning rate "
        "was chosen per point on held-out data "
        "(Table~\\ref{tab:scaling-lr})."
    )
    header = [
        "Corpus",
        "Axis",
        "$d$/$L$/data",
        "Params",
        *[h for _, h in VARIANT_COLS],
        "Ratio",
        "Share",
        "FFN vs Attn",
        "PIL vs Frozen",
    ]
    return Table(
        caption,
        "tab:scaling-points",
        "lll" + "r" * 8 + "cc",
        header,
        rows,
        "tbp",
        "scriptsize",
        "3pt",
    )


def trends_table(trend_frame: pl.DataFrame, cfg: ScalingReportParams) -> Table:
    rows: list[list[str] | str] = []
    for t in trend_frame.iter_rows(named=True):
        ci = MISSING if t["lo"] is None else f"[{fmt_num(t['lo'], 2)}, {fmt_num(t['hi'], 2)}]"
        lo, hi = t["size_lo"], t["size_hi"]
        span = f"{fmt_num(lo / 1e6, 2)}--{fmt_num(hi / 1e6, 2)}\\,M"
        rows.append(
            [
                corpus_name(t["corpus"]),
                AXIS_NAMES[t["axis"]],
                span,
                MEASURE_NAMES[t["measure"]],
                str(t["n_points"]),
                MISSING if t["slope"] is None else fmt_num(t["slope"], 2),
                ci,
                t["verdict"],
            ]
        )
    margin = fmt_num(100 * cfg.margin, 1)
    caption = (
        "Trends of attention-only's share: the least-squares slope of the share's mean over seeds "
        "against $\\log_2$ of the size (the baseline's non-embedding parameters; the training "
        "tokens on the data axis), in percentage points per doubling, with a 95\\,\\% percentile "
        f"bootstrap interval ({_thousands(cfg.resamples)} resamples of the seeds of each point). Declared "
        f"margin: flat within $\\pm${margin} points per doubling; a direction (grows, shrinks) "
        "only where the interval lies wholly beyond the margin; otherwise undecided."
    )
    return Table(
        caption,
        "tab:scaling-trends",
        "lllrrrll",
        ["Corpus", "Axis", "Size", "Measure", "Points", "Slope", "95\\,\\% CI", "Verdict"],
        rows,
        "tbp",
        "footnotesize",
        "4pt",
    )


def lr_table(points: pl.DataFrame, lr_records: dict, cfg: ScalingReportParams) -> Table:
    fams = list(cfg.families)
    rows: list[list[str] | str] = []
    for item in _ordered(points, cfg):
        if item == "midrule":
            rows.append(item)
            continue
        corpus, axis, point = item
        r = _row(points, corpus, point)
        rec = lr_records.get((corpus, point), {"families": {}})["families"]
        cells = [corpus_name(corpus), _size(r)]
        for fam in fams:
            f = rec.get(fam)
            mark = (
                ""
                if f is None
                else ("$^{\\dagger}$" if f["on_edge"] else "$^{*}$" if f["edge_hit"] else "")
            )
            cells.append(MISSING if f is None else fmt_sci(f["lr"], 0) + mark)
        cells += [
            MISSING if r["val_rise"] is None else fmt_num(r["val_rise"], 3),
            f"{r['overfit_seeds']}/{r['n_seeds']}",
        ]
        rows.append(cells)
    caption = (
        "Learning rate of each family at each point, picked at the first seed by the lowest "
        "validation loss over the grid; $^{*}$: the first pick was on an edge of the grid and the "
        "grid was extended beyond it; $^{\\dagger}$: the final pick is still on an edge. "
        "Families: "
        + "; ".join(
            f"{tex_escape(k)}: " + ", ".join(tex_escape(v) for v in vs)
            for k, vs in cfg.families.items()
        )
        + ". Overfitting of the baseline: its last validation loss minus the lowest on its "
        "curve (nats, mean over seeds) and the seeds where that rise exceeds "
        f"{fmt_num(cfg.overfit_tol, 2)} nats."
    )
    header = ["Corpus", "$d$/$L$/data", *[tex_escape(f) for f in fams], "Val.\\ rise", "Overfit"]
    return Table(
        caption,
        "tab:scaling-lr",
        "ll" + "r" * (len(fams) + 2),
        header,
        rows,
        "tbp",
        "footnotesize",
        "4pt",
    )


def corpora_table(tokens: dict, cfg: ScalingReportParams) -> Table:
    rows: list[list[str] | str] = []
    for (corpus, pct), meta in sorted(tokens.items()):
        t = meta["tokens"]
        rows.append(
            [
                corpus_name(corpus),
                f"{pct}\\,\\%",
                tex_escape(meta["policy"]),
                *[_thousands(t[s]) for s in ("train", "valid", "test")],
                fmt_num(meta["unigram_test_loss"], 3),
            ]
        )
    caption = (
        "Corpora of the scaling study: split policy (data source and how the splits were made), "
        "token counts of the splits each point trains, selects and is tested on, and the unigram "
        "floor of the loss share (add-one unigram of the whole train split, nats per token)."
    )
    return Table(
        caption,
        "tab:scaling-corpora",
        "llp{6.2cm}rrrr",
        [
            "Corpus",
            "Data",
            "Split policy",
            "Train",
            "Valid",
            "Test",
            "$\\mathcal{L}_{\\mathrm{uni}}$",
        ],
        rows,
        "tbp",
        "scriptsize",
        "3pt",
    )


def cost_table(cost: list[dict]) -> Table:
    rows: list[list[str] | str] = [
        [
            str(r["d_model"]),
            str(int(r["features"])),
            fmt_num(r["gram_s"], 3),
            fmt_num(r["decompose_s"], 3),
            fmt_num(r["solve_s"], 3),
            fmt_num(r["adamw_s"], 3),
            fmt_num(r["adamw_s"] / r["solve_s"], 2),
        ]
        for r in cost
    ]
    caption = (
        "Cost of the closed-form FFN solve against width, on one device in one job: every FFN "
        "layer solved bottom-up (Bi-PIL features $p$, Gram streaming over the train split, then "
        "the eigendecomposition and the held-out $\\lambda$ search) against AdamW training of the "
        "same FFNs for the configured epochs (steady-state step time $\\times$ steps); seconds, "
        "median over repeats. Other jobs of the build may share the device; the two sides of a "
        "width are timed back to back."
    )
    return Table(
        caption,
        "tab:scaling-cost",
        "rrrrrrr",
        ["$d$", "$p$", "Gram (s)", "Decomp.\\ (s)", "Solve (s)", "AdamW (s)", "AdamW/solve"],
        rows,
        "tbp",
        "footnotesize",
        "4pt",
    )
