"""The scaling study's report (``scaling-report``): summaries, claim frame, tables and the
``\\Scal*`` macros, rendered through ``pillm.paper.report.render_report``.

Tables: every point's perplexities, shares and paired comparisons (``scaling_points``); the
trend slopes with their intervals and verdicts (``scaling_trends``); each point's chosen rates
and overfitting record (``scaling_lr``); the corpora's split policies and token counts
(``scaling_corpora``); the solve's and AdamW's time against width (``scaling_cost``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pillm.data.sources import CORPUS_NAMES
from pillm.lm.config import ScalingReportParams
from pillm.lm.feature_maps import width_tex
from pillm.lm.scaling import parse_point
from pillm.lm.scaling_stats import (
    FLAT,
    GROWS,
    NO_INTERVAL,
    SHRINKS,
    TOO_FEW,
    UNDECIDED,
    power_exponent,
)
from pillm.lm.scaling_summary import (
    check_runs,
    overfit_rows,
    point_summary,
    read_curves,
    read_runs,
    seed_shares,
    trends,
    write_claims,
)
from pillm.lm.scaling_tables import (
    corpora_table,
    cost_table,
    lr_table,
    points_table,
    trends_table,
)
from pillm.paper.latex import MISSING, fmt_num, fmt_sci, macro_name, tex_escape
from pillm.paper.report import render_report
from pillm.paper.tidy import write_parquet
from pillm.paper.verdicts import HOLDS, INDISTINGUISHABLE, ONE_SEED, OPPONENT_UNTRAINED, REVERSED

ORIGIN = "pillm.lm.scaling_report from results/<name>/scaling"
HEADLINE = {FLAT: "holds", GROWS: "grows", SHRINKS: "shrinks"}
# A trend verdict as the verb of a sentence ("its PPL ratio grows", "... has no decided trend")
TREND_VERB = {
    FLAT: "stays flat",
    GROWS: "grows",
    SHRINKS: "shrinks",
    UNDECIDED: "has no decided trend",
    NO_INTERVAL: "has no interval (1 seed)",
    TOO_FEW: "has too few points for a trend",
}


@dataclass(frozen=True)
class ScalingReportInputs(ScalingReportParams):
    """``scaling-report --params`` (``pillm.lm.scaling.report_params``): the design and the
    trend tests' settings, the LM study's ``lm.trained_margin`` (nats), the drop of the
    training loss that makes a run trained, and the head width and FFN multiple the text
    states. Kept here, beside the jobs' section, so that the training jobs' code does not
    change with what only the report reads."""

    trained_margin: float
    head_dim: int  # scaling.head_dim: heads = d / head_dim
    ffn_mult: int  # model.ffn_mult: the FFN's width in units of d


def _pp(x: float | None, digits: int = 1) -> str:
    return MISSING if x is None else fmt_num(x, digits)


def _ci(t: dict[str, Any]) -> str:
    return MISSING if t["lo"] is None else f"[{_pp(t['lo'], 2)}, {_pp(t['hi'], 2)}]"


def headline(t: dict[str, Any], margin_pp: str, points: int) -> str:
    """The abstract's sentence on attention's loss share along the main corpus's width axis."""
    span = f"over {points} widths"
    slope = f"{_pp(t['slope'], 2)} points per doubling of parameters, 95\\,\\% bootstrap interval {_ci(t)}"
    if t["verdict"] == FLAT:
        return (
            f"attention-only's loss share holds {span}: its slope, {slope}, lies within the "
            f"declared $\\pm${margin_pp} points"
        )
    if t["verdict"] in (GROWS, SHRINKS):
        return (
            f"attention-only's loss share {t['verdict']} {span} by more than the declared "
            f"$\\pm${margin_pp} points per doubling ({slope})"
        )
    if t["slope"] is None or t["lo"] is None:
        return f"whether attention-only's loss share holds {span} is not decided: {t['verdict']}"
    return (
        f"whether attention-only's loss share holds {span} is undecided: its slope, {slope}, "
        f"is neither inside nor beyond the declared $\\pm${margin_pp} points"
    )


PAIR_WORDS = {
    "ffn_vs_attn": ("FFN-only", "attention-only"),
    # a frozen random FFN of standard initialisation: not a control of the solve (scaling.tex)
    "pil_vs_frozen": ("PIL-then-attention", "attention over a frozen random FFN"),
}


def pair_sentence(points: pl.DataFrame, name: str) -> str:
    """How a per-point paired comparison came out over the points that ran it: the verdicts of
    the claims module's test (``scaling_summary.paired``), the same as the declared claims'."""
    col = pl.col(f"{name}_verdict")
    ran = points.filter(col.is_in([HOLDS, REVERSED, INDISTINGUISHABLE, ONE_SEED]))
    a, b = PAIR_WORDS[name]
    skipped = points.filter(col == OPPONENT_UNTRAINED).height
    # the points left out: a comparison with an opponent that did not learn says nothing
    untrained = (
        f"; at {skipped} point{'s' if skipped != 1 else ''} the two were not compared, since a "
        "gradient-trained arm's training loss did not fall by the declared margin"
        if skipped
        else ""
    )
    if not ran.height:
        return f"{a} was not compared with {b} in this build{untrained}"
    if ran.filter(col == ONE_SEED).height:
        return f"{a} and {b} ran with one seed, so no comparison has an interval{untrained}"
    lower, higher = ran.filter(col == HOLDS).height, ran.filter(col == REVERSED).height
    same = ran.height - lower - higher
    return (
        f"{a} reaches a lower test perplexity than {b} at {lower} of {ran.height} points, a "
        f"higher one at {higher}, and the two are indistinguishable at {same} (95\\,\\% "
        f"interval over seeds){untrained}"
    )


def trend_phrase(t: dict[str, Any]) -> str:
    """'flat (slope 0.31, 95 % CI [-0.8, 1.2])': a trend's verdict with its evidence."""
    return f"{t['verdict']} (slope {_pp(t['slope'], 2)}, 95\\,\\% CI {_ci(t)})"


def base_words(points: pl.DataFrame, cfg: ScalingReportParams) -> str:
    """'$d{=}256$, $L{=}4$': the point where the main corpus's axes meet."""
    axes = cfg.axes[cfg.main]
    common = set(axes["width"]) & set(axes["depth"]) & set(axes["data"])
    if not common:
        return MISSING
    r = points.filter((pl.col("corpus") == cfg.main) & (pl.col("point") == sorted(common)[0]))
    return f"$d{{=}}{r['d_model'].item()}$, $L{{=}}{r['n_layer'].item()}$"


def corpus_widths(points: pl.DataFrame, cfg: ScalingReportParams) -> str:
    """The widths the other corpora run ('none' without other corpora)."""
    others = points.filter(pl.col("corpus") != cfg.main)
    return ", ".join(str(d) for d in sorted(set(others["d_model"]))) or "none"


def scaling_macros(
    points: pl.DataFrame,
    trend_frame: pl.DataFrame,
    cost: list[dict],
    lr_records: dict,
    cfg: ScalingReportParams,
    counts: dict,
    runs: pl.DataFrame | None = None,
    shares: pl.DataFrame | None = None,
) -> dict[str, str]:
    main = cfg.main
    widths = cfg.axes[main]["width"]
    margin_pp = fmt_num(100 * cfg.margin, 1)
    m: dict[str, str] = {
        "ScalMargin": margin_pp,
        "ScalResamples": str(cfg.resamples),
        "ScalSeeds": str(len(cfg.seeds)),
        "ScalPoints": str(points.height),
        "ScalRuns": str(counts["runs"]),
        "ScalSearchRuns": str(counts["search"]),
        "ScalCorpora": ", ".join(
            CORPUS_NAMES.get(c, tex_escape(c)) for c in [main, *sorted(set(cfg.axes) - {main})]
        ),
        "ScalMainCorpus": CORPUS_NAMES.get(main, tex_escape(main)),
        "ScalWidths": ", ".join(str(parse_point(main, p).d_model) for p in widths),
        "ScalDepths": ", ".join(str(parse_point(main, p).n_layer) for p in cfg.axes[main]["depth"]),
        "ScalFractions": ", ".join(str(parse_point(main, p).pct) for p in cfg.axes[main]["data"]),
        "ScalOverfitTol": fmt_num(cfg.overfit_tol, 2),
        "ScalEpochs": str(cfg.epochs),
        "ScalHeadDim": str(cfg.head_dim),
        "ScalFfnMult": str(cfg.ffn_mult),
        "ScalLrs": ", ".join(fmt_sci(x, 1) for x in cfg.lrs),
        "ScalBase": base_words(points, cfg),
        "ScalCorpusWidths": corpus_widths(points, cfg),
    }
    for t in trend_frame.filter(pl.col("corpus") == main).iter_rows(named=True):
        name = macro_name("main", t["axis"], t["measure"], prefix="Scal")
        m[f"{name}Slope"], m[f"{name}CI"] = _pp(t["slope"], 2), _ci(t)
        m[f"{name}Verdict"] = t["verdict"]
        m[f"{name}Trend"] = TREND_VERB[t["verdict"]]
    width = trend_frame.filter((pl.col("axis") == "width") & (pl.col("measure") == "attn_share"))
    m["ScalCorpusWidthShares"] = "; ".join(
        f"{CORPUS_NAMES.get(t['corpus'], tex_escape(t['corpus']))}: {trend_phrase(t)}"
        for t in width.iter_rows(named=True)
    )
    head = trend_frame.filter(
        (pl.col("corpus") == main)
        & (pl.col("axis") == "width")
        & (pl.col("measure") == "attn_share")
    ).row(0, named=True)
    m["ScalHeadline"] = headline(head, margin_pp, len(widths))
    m["ScalHeadlineVerdict"] = HEADLINE.get(head["verdict"], head["verdict"])
    m["ScalWidthFlatCorpora"] = (
        f"{width.filter(pl.col('verdict') == FLAT).height} of {width.height}"
    )
    for name in PAIR_WORDS:
        m[macro_name(name, prefix="ScalPair")] = pair_sentence(points, name)
    m |= trained_macros(runs)
    if runs is not None and shares is not None:
        m |= budget_macros(runs, shares, cfg)
    rising = points.filter(pl.col("overfit_seeds") > 0)
    m["ScalOverfitPoints"] = f"{rising.height} of {points.height}"
    m["ScalOverfitList"] = (
        ", ".join(
            f"{CORPUS_NAMES.get(r['corpus'], r['corpus'])} $d{{=}}{r['d_model']}$, $L{{=}}{r['n_layer']}$, "
            f"{r['pct']}\\,\\%"
            for r in rising.iter_rows(named=True)
        )
        or "none"
    )
    picks = [f for rec in lr_records.values() for f in rec["families"].values()]
    m["ScalLrPicks"] = str(len(picks))
    m["ScalLrEdgeHits"] = str(sum(f["edge_hit"] for f in picks))
    m["ScalLrOnEdge"] = str(sum(f["on_edge"] for f in picks))
    m["ScalLrExtensions"] = str(sum(f["extensions"] for f in picks))
    d = [r["d_model"] for r in cost]
    for key, col in (("Solve", "solve_s"), ("Adamw", "adamw_s"), ("Decompose", "decompose_s")):
        b = power_exponent(d, [r[col] for r in cost])
        m[f"ScalCost{key}Exponent"] = _pp(b, 1)
    if cost:
        m["ScalCostRatioSmall"] = _pp(cost[0]["adamw_s"] / cost[0]["solve_s"], 2)
        m["ScalCostRatioLarge"] = _pp(cost[-1]["adamw_s"] / cost[-1]["solve_s"], 2)
        m["ScalCostSmallD"], m["ScalCostLargeD"] = str(d[0]), str(d[-1])
        m["ScalCostDevice"] = tex_escape(cost[0].get("device_name", "unknown"))
        m["ScalCostFeatureDim"] = feature_dim(cost)
    return m


def feature_dim(cost: list[dict]) -> str:
    """The solve's random features per width, as measured, in units of d (``8d``): the count
    less the bias column, the same multiple of d at every width or '--'."""
    mults = {(r["features"] - 1) / r["d_model"] for r in cost}
    if len(mults) != 1 or not next(iter(mults)).is_integer():
        return MISSING
    return width_tex(int(next(iter(mults))))


def budget_macros(runs: pl.DataFrame, shares: pl.DataFrame, cfg) -> dict[str, str]:
    """The training budget behind the data axis: the runs keep the epochs, so a smaller share of
    the train split also means fewer optimizer steps. ``ScalBaseSteps``: the steps of a run at
    the full split; ``ScalDataSteps``: each data point's, in the order of ``ScalFractions``;
    ``ScalDataBelowFloor``: of the data axis's attention-only runs, how many end above the
    unigram floor (a negative loss share: the model has not learned what word counts give)."""
    main, data = cfg.main, cfg.axes[cfg.main]["data"]
    base = runs.filter((pl.col("corpus") == main) & (pl.col("variant") == "baseline"))
    steps = [base.filter(pl.col("point") == p)["train_steps"].max() for p in data]
    full = [s for p, s in zip(data, steps, strict=True) if parse_point(main, p).pct == 100]
    axis = shares.filter((pl.col("corpus") == main) & pl.col("point").is_in(data))
    below = axis["attn_share"].drop_nulls()
    words = [str(int(s)) if s is not None else "--" for s in steps]
    listed = f"{', '.join(words[:-1])} and {words[-1]}" if len(words) > 1 else "".join(words)
    return {
        "ScalBaseSteps": str(int(full[0])) if full and full[0] is not None else "--",
        "ScalDataSteps": listed,
        "ScalDataBelowFloor": f"{(below < 0).sum()} of {below.len()}",
    }


def trained_macros(runs: pl.DataFrame | None) -> dict[str, str]:
    """Over every scaling run with a gradient phase: how many (``ScalGradientRuns``), how many
    did not train (``ScalUntrainedRuns``) and the smallest training-loss drop in nats."""
    flags = [] if runs is None else runs["trained"].drop_nulls().to_list()
    drops = [] if runs is None else runs["train_loss_drop"].drop_nulls().to_list()
    return {
        "ScalGradientRuns": str(len(flags)),
        "ScalUntrainedRuns": str(sum(1 for x in flags if x != 1)),
        "ScalMinTrainLossDrop": fmt_num(min(drops), 2) if drops else MISSING,
    }


def scaling_report(
    lrs: list[str],
    tokens_metas: list[str],
    cost_path: str,
    params: dict[str, Any],
    templates: list[str],
    runs_path: str,
    claims_path: str,
    tables: list[str],
    numbers_path: str,
) -> None:
    """Every point's runs (``runs.parquet``, ``curves.parquet`` beside each ``lr.json``) into
    the summaries (``runs_path``, one row per run, with ``scaling_points``, ``scaling_trends``,
    ``scaling_curves``, ``scaling_shares`` and ``scaling_cost`` parquet beside it), the claim frame ``claims_path``,
    the tables (``tables``: ``scaling_<name>.tex`` for each of ``TABLES``) and the macros."""
    cfg = ScalingReportInputs.from_dict(params, "scaling report")
    tokens = {}
    for path in tokens_metas:
        meta = json.loads(Path(path).read_text())
        tokens[(Path(path).parent.parent.name, round(100 * meta["train_fraction"]))] = meta
    unigram = {c: meta["unigram_test_loss"] for (c, pct), meta in tokens.items() if pct == 100}
    folders = [Path(p).parent for p in lrs]
    runs = read_runs([str(f / "runs.parquet") for f in folders], lrs, cfg.trained_margin)
    check_runs(runs, params)
    curve_frame = read_curves([str(f / "curves.parquet") for f in folders])
    shares = seed_shares(runs, unigram)
    overfit = overfit_rows(curve_frame, cfg.overfit_tol)
    points = point_summary(runs, shares, overfit, tokens, params)
    trend_frame = trends(points, shares, params)
    lr_records = {(f.parent.name, f.name): json.loads((f / "lr.json").read_text()) for f in folders}
    cost = json.loads(Path(cost_path).read_text())
    write_parquet(runs, runs_path)
    out = Path(runs_path).parent
    for name, df in (
        ("scaling_points", points),
        ("scaling_trends", trend_frame),
        ("scaling_curves", curve_frame),
        ("scaling_shares", shares),
        ("scaling_cost", pl.DataFrame(cost)),
    ):
        write_parquet(df, out / f"{name}.parquet")
    write_claims(claims_path, runs, trend_frame)
    search = sum(
        len(f["runs"]) - 1 for rec in lr_records.values() for f in rec["families"].values()
    )
    counts = {"runs": runs.height, "search": search}
    built = {
        "points": points_table(points, cfg),
        "trends": trends_table(trend_frame, cfg),
        "lr": lr_table(points, lr_records, cfg),
        "corpora": corpora_table(tokens, cfg),
        "cost": cost_table(cost),
    }
    by_name = {Path(t).stem.removeprefix("scaling_"): t for t in tables}
    if missing := sorted(set(built) ^ set(by_name)):
        raise ValueError(
            f"scaling-report --tables: expected scaling_<name>.tex for {sorted(built)}, "
            f"mismatch {missing}"
        )
    render_report(
        {by_name[k]: t for k, t in built.items()},
        scaling_macros(points, trend_frame, cost, lr_records, cfg, counts, runs, shares),
        Path(templates[0]).parent,
        numbers_path,
        ORIGIN,
        prefix="Scal",
    )
