"""How much the contribution share depends on the configuration: a learning-rate x dropout grid.

Every grid point runs baseline, attention-only and (optionally) FFN-only with ``run-lm``, the
main runs' trainer, their model and train sections overridden by the point's ``train.lr`` and
``model.dropout`` (``pillm.lm.plan.sensitivity_params``); runs land in
``results/<name>/sensitivity/<variant>/<point>/seed<k>/``. Per grid point, from test loss and
perplexity (means over seeds of per-seed values):

* PPL ratio of an arm: PPL_full / PPL_arm (the "83 %" of the seed outline for attention-only);
* loss share of an arm: (L_uni - L_arm) / (L_uni - L_full), L_uni the add-one unigram test loss.

*Trained*: a run whose final training loss lies ``lm.trained_margin`` nats or more below its
first step's (``pillm.lm.train.loss_fall``; the LM study's rule, ``pillm.lm.aggregate``). A
share against an arm that did not learn measures the failed run, not the sublayer, so:

*Sensible* grid points are those whose baseline validation loss (mean over seeds) is within
``sensitivity.margin`` nats of the grid's best and whose every run trained; the paper quotes the
range [min, max] of both measures over them. Each variant's *selected* point is its lowest
validation loss (the held-out tail) among the points where all its runs trained (every point,
if none did); the selected shares compare each arm at its own selected point, reported on test,
and are not reported where a run of either selected point did not train.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from pillm.core.records import read_records
from pillm.lm.config import SensitivityConfig
from pillm.lm.plan import sensitivity_points
from pillm.paper.latex import MISSING, count_of, fmt_num, fmt_range, fmt_sci
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import loss_share, write_parquet

METRICS = ("val_loss", "test_loss", "test_ppl")
TRAINED_KEY = "trained_margin"  # --params: lm.trained_margin beside the sensitivity section
ARMS = {"attn": "attn_only", "ffn": "ffn_only"}  # measure prefix -> the variant it compares
ORIGIN = "pillm.lm.sensitivity from results/<name>/sensitivity"


def _config(params: dict[str, Any]) -> tuple[SensitivityConfig, dict[str, tuple[float, float]]]:
    sens = {k: v for k, v in params.items() if k != TRAINED_KEY}
    cfg = SensitivityConfig.from_dict(sens, "sensitivity")
    return cfg, sensitivity_points({"sensitivity": params})


def read_sensitivity_runs(metrics_paths: list[str], params: dict[str, Any]) -> pl.DataFrame:
    """One row per run: variant, point, lr, dropout, seed, the metrics used here, the drop of
    its training loss and whether it trained (``params["trained_margin"]``), provenance.

    The point is the run folder's parent (``<variant>/<point>/seed<k>/metrics.json``). Raises
    ValueError naming every expected (variant, point, seed) that has no run, and every run folder
    whose point is not in the config's grid.
    """
    cfg, points = _config(params)
    rows = []
    for path in metrics_paths:
        records = read_records([path])
        point = Path(path).parent.parent.name
        if point not in points:
            raise ValueError(
                f"{path}: grid point {point!r} is not in sensitivity.lrs x sensitivity.dropouts "
                f"{sorted(points)}; pass only this config's sensitivity runs"
            )
        by_metric = {r["metric"]: r["value"] for r in records}
        first = records[0]
        lr, dropout = points[point]
        # a record without both losses (or a NaN one) is no evidence of a fall: not trained
        drop = by_metric.get("train_loss_first", math.nan) - by_metric.get(
            "train_loss_final", math.nan
        )
        rows.append(
            {
                "variant": first["variant"],
                "point": point,
                "lr": lr,
                "dropout": dropout,
                "seed": int(first["seed"]),
                **{m: by_metric[m] for m in METRICS},
                "train_loss_drop": drop,
                "trained": float(drop >= params[TRAINED_KEY]),
                "git_rev": first.get("git_rev", "unknown"),
                "device_name": first.get("device_name", "unknown"),
            }
        )
    runs = pl.DataFrame(rows)
    have = {(r["variant"], r["point"], r["seed"]) for r in rows}
    want = {(v, p, s) for v in cfg.variants for p in points for s in cfg.seeds}
    if missing := sorted(want - have):
        raise ValueError(
            f"sensitivity: no run for (variant, point, seed) {missing}; run the sensitivity_run "
            "jobs first (workflow/rules/sensitivity.smk)"
        )
    return runs


def point_summary(runs: pl.DataFrame, unigram_loss: float, params: dict[str, Any]) -> pl.DataFrame:
    """One row per grid point: each variant's mean metrics and runs that did not train
    (``untrained_<variant>``), both measures per arm (per seed, then the mean), ``sensible``
    and each variant's ``selected_<variant>`` flag."""
    cfg, points = _config(params)
    per_seed: dict[tuple[str, str, int], dict[str, float]] = {
        (r["variant"], r["point"], r["seed"]): r for r in runs.iter_rows(named=True)
    }
    out = []
    for point, (lr, dropout) in points.items():
        row: dict[str, Any] = {"point": point, "lr": lr, "dropout": dropout}
        row["n_seeds"] = len(cfg.seeds)
        for v in cfg.variants:
            for m in METRICS:
                row[f"{v}_{m}"] = _mean(per_seed[(v, point, s)][m] for s in cfg.seeds)
            row[f"untrained_{v}"] = sum(per_seed[(v, point, s)]["trained"] != 1 for s in cfg.seeds)
        row["untrained_runs"] = sum(row[f"untrained_{v}"] for v in cfg.variants)
        for arm, variant in ARMS.items():
            ratio = share = None
            if variant in cfg.variants:
                full = [per_seed[("baseline", point, s)] for s in cfg.seeds]
                part = [per_seed[(variant, point, s)] for s in cfg.seeds]
                ratio = _mean(
                    f["test_ppl"] / p["test_ppl"] for f, p in zip(full, part, strict=True)
                )
                share = _mean(
                    loss_share(unigram_loss, p["test_loss"], f["test_loss"])
                    for f, p in zip(full, part, strict=True)
                )
            row[f"{arm}_ppl_ratio"], row[f"{arm}_loss_share"] = ratio, share
        out.append(row)
    best = min(r["baseline_val_loss"] for r in out)
    for r in out:
        r["sensible"] = r["baseline_val_loss"] <= best + cfg.margin and not r["untrained_runs"]
    for v in cfg.variants:
        candidates = [r for r in out if not r[f"untrained_{v}"]] or out
        chosen = min(candidates, key=lambda r: r[f"{v}_val_loss"])["point"]
        for r in out:
            r[f"selected_{v}"] = r["point"] == chosen
    return pl.DataFrame(out)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def sensitivity_macros(points: pl.DataFrame, params: dict[str, Any], unigram: float) -> dict:
    """The paragraph's numbers: grid, sensible count, each arm's range over sensible points and
    at the selected points (percent), and the selected settings."""
    cfg, _ = _config(params)
    sensible = points.filter(pl.col("sensible"))
    macros = {
        "SensNPoints": str(points.height),
        "SensNSensible": str(sensible.height),
        "SensSeedsPerPoint": count_of(len(cfg.seeds), "seed"),
        "SensNSeeds": str(len(cfg.seeds)),
        "SensNRuns": str(points.height * len(cfg.variants) * len(cfg.seeds)),
        "SensMargin": fmt_num(cfg.margin, 2),
        "SensLrs": ", ".join(fmt_sci(x, 0) for x in cfg.lrs),
        "SensDropouts": ", ".join(fmt_num(x, 2) for x in cfg.dropouts),
        "SensUntrainedRuns": str(int(points["untrained_runs"].sum())),
        "SensUntrainedPoints": str(points.filter(pl.col("untrained_runs") > 0).height),
    }
    selected = {v: points.filter(pl.col(f"selected_{v}")).row(0, named=True) for v in cfg.variants}
    for v, name in (("baseline", "Base"), *((v, _camel(a)) for a, v in ARMS.items())):
        if v in selected:
            macros[f"Sens{name}Lr"] = fmt_sci(selected[v]["lr"], 0)
            macros[f"Sens{name}Dropout"] = fmt_num(selected[v]["dropout"], 2)
    for arm, variant in ARMS.items():
        prefix = "Sens" if arm == "attn" else "SensFfn"
        have = variant in cfg.variants
        for measure, word in (("ppl_ratio", "Ratio"), ("loss_share", "Share")):
            lo, hi = (sensible[f"{arm}_{measure}"].min(), sensible[f"{arm}_{measure}"].max())
            macros[f"{prefix}{word}Min"] = _pct(lo if have else None)
            macros[f"{prefix}{word}Max"] = _pct(hi if have else None)
            # 'min--max', one number where both print alike (one sensible point)
            macros[f"{prefix}{word}Range"] = (
                fmt_range(100 * lo, 100 * hi, 1) if have and sensible.height else MISSING
            )
        base = selected["baseline"]
        # a selected run that did not train makes the comparison meaningless: not reported
        have = have and not (
            base["untrained_baseline"] or selected[variant][f"untrained_{variant}"]
        )
        if have:
            part = selected[variant]
            ratio = base["baseline_test_ppl"] / part[f"{variant}_test_ppl"]
            share = loss_share(unigram, part[f"{variant}_test_loss"], base["baseline_test_loss"])
        macros[f"{prefix}SelRatio"] = _pct(ratio if have else None)
        macros[f"{prefix}SelShare"] = _pct(share if have else None)
    return macros


def _camel(arm: str) -> str:
    return arm[:1].upper() + arm[1:]


def _pct(x: float | None) -> str:
    return MISSING if x is None or not math.isfinite(x) else fmt_num(100 * x, 1)


def sensitivity_rows(points: pl.DataFrame, params: dict[str, Any]) -> list[list[str]]:
    """Table rows: one per grid point; a variant's selected point marked with an asterisk."""
    cfg, _ = _config(params)
    rows = []
    for r in points.iter_rows(named=True):
        cells = [fmt_sci(r["lr"], 0), fmt_num(r["dropout"], 2), fmt_num(r["baseline_val_loss"], 3)]
        for v in ("baseline", *ARMS.values()):
            if v in cfg.variants:
                mark = "$^{*}$" if r[f"selected_{v}"] else ""
                cells.append(fmt_num(r[f"{v}_test_ppl"], 1) + mark)
            else:
                cells.append(MISSING)
        for arm in ARMS:
            cells += [_pct(r[f"{arm}_ppl_ratio"]), _pct(r[f"{arm}_loss_share"])]
        cells.append("yes" if r["sensible"] else "untrained" if r["untrained_runs"] else "no")
        rows.append(cells)
    return rows


def sensitivity_table(points: pl.DataFrame, params: dict[str, Any]) -> Table:
    cfg, _ = _config(params)
    caption = (
        "Sensitivity of the contribution measures to learning rate and dropout "
        f"(test set; mean over {count_of(len(cfg.seeds), 'seed')} per grid point). PPL ratio of an arm: "
        "$\\PPL_{\\mathrm{full}}/\\PPL_{\\mathrm{arm}}$; loss share: "
        "$(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L}_{\\mathrm{arm}})/"
        "(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L}_{\\mathrm{full}})$, both in \\%. "
        "Sensible: baseline validation loss within "
        f"{fmt_num(cfg.margin, 2)} nats of the grid's best and every run trained (untrained: "
        "a run's training loss fell by less than the declared margin). $^{*}$: the point each "
        "variant selects by its validation loss."
    )
    header = [
        "lr",
        "Dropout",
        "Full val.\\ loss",
        "Full",
        "Attn",
        "FFN",
        "Attn ratio",
        "Attn share",
        "FFN ratio",
        "FFN share",
        "Sensible",
    ]
    return Table(
        caption,
        "tab:lm-sensitivity",
        "ll" + "r" * 8 + "c",
        header,
        sensitivity_rows(points, params),
        "t",
        "small",
        "4pt",
    )


def sensitivity_report(
    metrics_paths: list[str],
    tokens_meta_path: str,
    params: dict[str, Any],
    template_dir: str,
    out_dir: str,
    table_path: str,
    numbers_path: str,
) -> None:
    """Write ``sensitivity_runs.parquet`` (per run) and ``sensitivity.parquet`` (per grid point)
    into ``out_dir``, the table to ``table_path`` and the ``\\Sens*`` macros to ``numbers_path``."""
    unigram = json.loads(Path(tokens_meta_path).read_text())["unigram_test_loss"]
    runs = read_sensitivity_runs(metrics_paths, params)
    points = point_summary(runs, unigram, params)
    write_parquet(runs, Path(out_dir) / "sensitivity_runs.parquet")
    write_parquet(points, Path(out_dir) / "sensitivity.parquet")
    render_report(
        {table_path: sensitivity_table(points, params)},
        sensitivity_macros(points, params, unigram),
        template_dir,
        numbers_path,
        ORIGIN,
        prefix="Sens",
    )
