"""The scaling study's summaries, torch-free: its runs, per-point shares, paired comparisons,
overfitting and trend slopes, and the claim frame (``summary/claims/scaling.parquet``).

Measures at each point, per seed (the same seed in both arms), then over seeds:

* PPL ratio of an arm: PPL_full / PPL_arm (the seed outline's "83 %" for attention-only);
* loss share of an arm: (L_uni - L_arm) / (L_uni - L_full) (``pillm.paper.tidy.loss_share``),
  L_uni the add-one unigram loss of the corpus's whole train split on the test tokens, one floor
  for every point of a corpus (``scaling_run.subset_tokens``).

Trends: each measure of attention-only against log2 of the baseline's non-embedding parameters
(width and depth axes) or of the training tokens (data axis), in percentage points per doubling
(``pillm.lm.scaling_stats``). Paired comparisons per point use the claims module's own interval
and verdict, so the table and the declared claims (``paper/claims/scaling.yaml``) agree.

Trained: every run records its first and final training loss (``pillm.lm.train.loss_fall``);
a run trained when the drop is at least ``lm.trained_margin`` nats (``pillm.lm.aggregate``), the
LM study's rule. A comparison naming a gradient opponent (``OPPONENTS``) that did not train at
one of its seeds is not evaluated, here as in the claims (``opponents:`` in the claims file).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from pillm.lm.aggregate import TRAINED, trained_rows
from pillm.lm.scaling import AXES, arm, parse_point
from pillm.lm.scaling_stats import BOOT_METHOD, trend
from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.claims import interval, verdict
from pillm.paper.tidy import ci95, loss_share
from pillm.paper.verdicts import BOOTSTRAP, NOT_RUN, Result

METRICS = (
    "test_loss",
    "test_ppl",
    "test_acc",
    "val_loss",
    "params_non_embedding",
    "params_total",
    "grad_time_s",
    "solve_time_s",
    "train_steps",
    "train_loss_drop",
    TRAINED,
)
CLAIM_METRICS = ("test_ppl", "test_loss")
ARMS = {"attn": "attn_only", "ffn": "ffn_only"}  # share prefix -> the arm compared with baseline
MEASURES = {"attn_share": "loss share", "attn_ratio": "PPL ratio"}  # the trend tests
# per-point paired comparisons: (name, a, b), difference a - b in test perplexity
PAIRS = (
    ("ffn_vs_attn", "ffn_only", "attn_only"),
    ("pil_vs_frozen", "pil_then_attn", "frozen_ffn_attn"),
)
TREND_SEED = 0
# The gradient-trained arms a comparison is made against: every variant but PIL-then-attention,
# the closed form's own arm (as paper/claims/lm.yaml's and scaling.yaml's opponents:).
OPPONENTS = ("baseline", "attn_only", "ffn_only", "frozen_ffn_attn")
RUN_KEYS = ("corpus", "point", "variant", "seed")


def ordered_axes(params: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(corpus, axis, point names) with the main corpus first and the axes in AXES order (the
    JSON that carries ``params`` sorts its keys)."""
    axes = params["axes"]
    corpora = [params["main"], *sorted(set(axes) - {params["main"]})]
    return [(c, a, axes[c][a]) for c in corpora for a in AXES if a in axes[c]]


def read_runs(runs_paths: list[str], lr_paths: list[str], margin: float) -> pl.DataFrame:
    """One row per run: corpus, point, its size, variant, seed, metrics, rate and provenance,
    from the points' ``runs.parquet`` (tidy metric records) and ``lr.json``; with
    ``train_loss_drop`` and ``trained`` (drop >= ``margin`` nats) per run that trained."""
    rates: dict[tuple[str, str], dict[str, float]] = {}
    for path in lr_paths:
        p = Path(path)
        rates[(p.parent.parent.name, p.parent.name)] = json.loads(p.read_text())["lr"]
    records = pl.concat([pl.read_parquet(p) for p in runs_paths], how="diagonal_relaxed")
    keys = list(RUN_KEYS)
    records = pl.concat([records, trained_rows(records, margin, RUN_KEYS)], how="diagonal_relaxed")
    wide = (
        records.filter(pl.col("metric").is_in(METRICS))
        .pivot(on="metric", index=keys, values="value")
        .join(
            records.group_by(keys).agg(pl.col("git_rev").first(), pl.col("device_name").first()),
            on=keys,
        )
    )
    rows = []
    for r in wide.iter_rows(named=True):
        pt = parse_point(r["corpus"], r["point"])
        rows.append(
            {
                "experiment": f"scaling:{r['corpus']}",  # a run's identity with its point
                "corpus": r["corpus"],
                "point": r["point"],
                "d_model": pt.d_model,
                "n_layer": pt.n_layer,
                "pct": pt.pct,
                "variant": r["variant"],
                "seed": int(r["seed"]),
                **{m: r.get(m) for m in METRICS},
                "lr": rates.get((r["corpus"], r["point"]), {}).get(r["variant"]),
                "git_rev": r["git_rev"],
                "device_name": r["device_name"],
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None).sort(keys)


def check_runs(runs: pl.DataFrame, params: dict[str, Any]) -> None:
    """ValueError naming every expected (corpus, point, variant, seed) without a run."""
    have = set(runs.select("corpus", "point", "variant", "seed").iter_rows())
    want = {
        (c, p, v, s)
        for c, axes in params["axes"].items()
        for names in axes.values()
        for p in names
        for v in params["variants"][c]
        for s in params["seeds"]
    }
    if missing := sorted(want - have):
        raise ValueError(
            f"scaling: no run for (corpus, point, variant, seed) {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}; run the scaling_point jobs "
            "(workflow/rules/scaling.smk)"
        )


def seed_shares(runs: pl.DataFrame, unigram: dict[str, float]) -> pl.DataFrame:
    """Per corpus, point and seed: each arm's PPL ratio and loss share against the baseline."""
    by = {(r["corpus"], r["point"], r["variant"], r["seed"]): r for r in runs.iter_rows(named=True)}
    rows = []
    for (corpus, point, variant, seed), full in by.items():
        if variant != "baseline":
            continue
        row: dict[str, Any] = {"corpus": corpus, "point": point, "seed": seed}
        for prefix, name in ARMS.items():
            part = by.get((corpus, point, name, seed))
            row[f"{prefix}_ratio"] = full["test_ppl"] / part["test_ppl"] if part else None
            row[f"{prefix}_share"] = (
                loss_share(unigram[corpus], part["test_loss"], full["test_loss"]) if part else None
            )
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None).sort("corpus", "point", "seed")


def paired(runs: pl.DataFrame, corpus: str, point: str, a: str, b: str) -> Result:
    """The claims module's paired test of test perplexity, a - b, seed by seed; not evaluated
    ("opponent did not train") where an arm of ``OPPONENTS`` did not train at a paired seed."""
    sub = runs.filter((pl.col("corpus") == corpus) & (pl.col("point") == point))
    vals = {
        v: dict(zip(g["seed"], g["test_ppl"], strict=True)) for (v,), g in sub.group_by("variant")
    }
    r = Result(f"{corpus}_{point}_{a}_{b}", "scaling", "test_ppl", "direction", a, b, "lower", "")
    if a not in vals or b not in vals:
        r.missing, r.verdict = ", ".join(v for v in (a, b) if v not in vals), NOT_RUN
        return r
    seeds = sorted(set(vals[a]) & set(vals[b]))
    for key, value in interval([vals[a][s] - vals[b][s] for s in seeds], BOOTSTRAP).items():
        setattr(r, key, value)
    r.untrained = untrained_arms(sub, (a, b), seeds)
    r.verdict = verdict(r)
    return r


def untrained_arms(runs: pl.DataFrame, variants: tuple[str, ...], seeds: list[int]) -> str:
    """'frozen_ffn_attn: seeds 0, 2' for each of ``variants`` in ``OPPONENTS`` whose run did
    not train at one of ``seeds`` (no record counts as not trained); '' when all did."""
    out = []
    for v in (v for v in variants if v in OPPONENTS):
        flags = dict(runs.filter(pl.col("variant") == v).select("seed", TRAINED).iter_rows())
        bad = [s for s in seeds if flags.get(s) != 1]
        if bad:
            out.append(f"{v}: seed{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}")
    return "; ".join(out)


def overfit_rows(curves: pl.DataFrame, tol: float) -> pl.DataFrame:
    """Per run: the curve's lowest validation loss, its last one, their gap and whether the gap
    exceeds ``tol`` (the run ended past its best held-out loss: overfitting)."""
    val = curves.filter(pl.col("val_loss").is_not_null())
    return (
        val.sort("step")
        .group_by("corpus", "point", "variant", "seed")
        .agg(
            pl.col("val_loss").min().alias("val_min"),
            pl.col("val_loss").last().alias("val_end"),
            pl.col("step").get(pl.col("val_loss").arg_min()).alias("step_min"),
            pl.col("step").max().alias("step_end"),
        )
        .with_columns((pl.col("val_end") - pl.col("val_min")).alias("val_rise"))
        .with_columns((pl.col("val_rise") > tol).alias("overfit"))
        .sort("corpus", "point", "variant", "seed")
    )


def read_curves(paths: list[str]) -> pl.DataFrame:
    """Every run's curve with its corpus and point (the points' ``curves.parquet``)."""
    cols = ["corpus", "point", "variant", "seed", "step", "tokens", "train_loss", "val_loss"]
    return pl.concat([pl.read_parquet(p).select(cols) for p in paths], how="vertical_relaxed")


def _mean_ci(xs: list[float]) -> tuple[float | None, float | None]:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else None
    return mean, ci95(std, len(xs))


def point_summary(
    runs: pl.DataFrame,
    shares: pl.DataFrame,
    overfit: pl.DataFrame,
    tokens: dict[tuple[str, int], dict],
    params: dict[str, Any],
) -> pl.DataFrame:
    """One row per (corpus, point): size, tokens, each variant's mean test PPL, the shares
    (mean and 95 % t half-width over seeds), the paired comparisons and the baseline's
    overfitting record."""
    out = []
    for corpus, axes in params["axes"].items():
        for point in dict.fromkeys(p for names in axes.values() for p in names):
            pt = parse_point(corpus, point)
            here = runs.filter((pl.col("corpus") == corpus) & (pl.col("point") == point))
            base = here.filter(pl.col("variant") == "baseline")
            row: dict[str, Any] = {
                "corpus": corpus,
                "point": point,
                "d_model": pt.d_model,
                "n_layer": pt.n_layer,
                "pct": pt.pct,
                "axes": ",".join(a for a, n in axes.items() if point in n),
                "params": float(base["params_non_embedding"].mean()),
                "params_total": float(base["params_total"].mean()),
                "train_tokens": tokens[(corpus, pt.pct)]["tokens"]["train"],
            }
            for v in params["variants"][corpus]:
                sub = here.filter(pl.col("variant") == v)
                row[f"{v}_ppl"], row[f"{v}_ppl_ci"] = _mean_ci(sub["test_ppl"].to_list())
                row[f"{v}_lr"] = sub["lr"].first() if sub.height else None
            sh = shares.filter((pl.col("corpus") == corpus) & (pl.col("point") == point))
            for col in ("attn_ratio", "attn_share", "ffn_ratio", "ffn_share"):
                row[col], row[f"{col}_ci"] = _mean_ci(sh[col].to_list())
            for name, a, b in PAIRS:
                r = paired(runs, corpus, point, a, b)
                row |= {
                    f"{name}_diff": r.diff,
                    f"{name}_lo": r.ci_lo,
                    f"{name}_hi": r.ci_hi,
                    f"{name}_n": r.n,
                    f"{name}_verdict": r.verdict,
                }
            of = overfit.filter(
                (pl.col("corpus") == corpus)
                & (pl.col("point") == point)
                & (pl.col("variant") == "baseline")
            )
            row["val_rise"] = float(of["val_rise"].mean()) if of.height else None
            row["overfit_seeds"] = int(of["overfit"].sum()) if of.height else 0
            row["n_seeds"] = base.height
            out.append(row)
    return pl.DataFrame(out, infer_schema_length=None)


def trends(points: pl.DataFrame, shares: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """One row per (corpus, axis, measure): the slope in percentage points per doubling of the
    axis's size (parameters; tokens on the data axis), its interval and verdict."""
    rows = []
    margin = params["margin"]
    for corpus, axis, names in ordered_axes(params):
        pts = points.filter(pl.col("corpus") == corpus)
        size = "train_tokens" if axis == "data" else "params"
        sizes = [pts.filter(pl.col("point") == p)[size].item() for p in names]
        for measure in MEASURES:
            vals = [
                shares.filter((pl.col("corpus") == corpus) & (pl.col("point") == p))[measure]
                .drop_nulls()
                .to_list()
                for p in names
            ]
            t = trend(
                sizes,
                [[100 * v for v in vs] for vs in vals],
                100 * margin,
                params["resamples"],
                TREND_SEED,
            )
            rows.append(
                {
                    "corpus": corpus,
                    "axis": axis,
                    "measure": measure,
                    "size": size,
                    "size_lo": min(sizes),
                    "size_hi": max(sizes),
                    **t,
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)


def claim_rows(runs: pl.DataFrame, trend_frame: pl.DataFrame) -> tuple[list, list]:
    """The claim frame's seed rows (every run's test PPL and loss and, where it trained by
    gradient, its ``trained`` flag; arm = corpus/point/variant) and interval rows (each trend's
    slope: a = corpus/axis, b = the size's log2)."""
    seed_rows = [
        {
            "arm": arm(r["corpus"], r["point"], r["variant"]),
            "seed": r["seed"],
            "metric": m,
            "value": r[m],
        }
        for r in runs.iter_rows(named=True)
        for m in (*CLAIM_METRICS, TRAINED)
        if m != TRAINED or r[m] is not None  # a run without a gradient phase has no flag
    ]
    interval_rows = [
        {
            "a": f"{t['corpus']}/{t['axis']}",
            "b": f"log2_{t['size']}",
            "metric": f"{t['measure']}_slope",
            "diff": t["slope"],
            "lo": t["lo"],
            "hi": t["hi"],
            "n": t["n_points"],
            "method": BOOT_METHOD,
        }
        for t in trend_frame.iter_rows(named=True)
        if t["lo"] is not None
    ]
    return seed_rows, interval_rows


def write_claims(path: str, runs: pl.DataFrame, trend_frame: pl.DataFrame) -> pl.DataFrame:
    return write_claim_frame(path, *claim_rows(runs, trend_frame))
