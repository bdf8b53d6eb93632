"""Aggregation and claim frame of the SAFFU study.

``aggregate_saffu`` stacks every SAFFU job (``metrics.json``: one run per seed x init;
``curve.parquet``) and the Kneser-Ney job into ``summary/saffu_runs.parquet`` (tidy rows as
written), ``summary/saffu.parquet`` (mean, std, n and 95 % t half-width over seeds per setting x
init x train fraction x metric, on the expected grid, so a missing run shows as
``n < n_expected``), ``summary/saffu_curves.parquet``, ``summary/kneser_ney.parquet`` (the n-gram
baseline on the full train split: the LM table's row) and the claim frame
``summary/claims/saffu.parquet`` (per seed, the main setting's arms at every fraction:
``explicit_f10``, ``warm_f10``, ``cold_f10``, ``kn_f10``, and the warm start's gain over the cold
start in nats, ``gain_f10``; pillm.saffu.data.arm). The tables, macros (pillm.saffu.report,
pillm.saffu.tables) and figures read only these summaries.

Trained: the cold start is the gradient opponent of the explicit solution. A job records its
held-out loss at the start (``init_val_loss``) and at the kept weights (``val_loss``), no
training loss at step 0, so the cold run's ``heldout_loss_drop`` is their difference and it
``trained`` when that drop is ``lm.trained_margin`` nats or more (``pillm.paper.trained``): the
same next-token loss in nats as the LM's rule. The claim frame carries the flag for the cold
arms and, the same value, for the gain arms (cold minus warm), the claims' ``opponents:``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.tidy import concat_parquet, read_runs, summarise, write_parquet
from pillm.paper.trained import fall_rows
from pillm.paper.verdicts import TRAINED_METRIC
from pillm.saffu.data import arm

GROUP = ["variant", "init", "fraction", "agg", "block", "radius", "corpus", "tokenizer",
         "data_policy"]  # fmt: skip
KN_GROUP = ["variant", "init", "fraction", "corpus", "tokenizer", "data_policy"]
KN = "kneser_ney"
FULL = 1.0
COLD = "random"  # the init of the cold start, the study's gradient opponent
RUN_KEYS = ("variant", "init", "fraction", "seed")


def trained_rows(runs: pl.DataFrame, margin: float) -> pl.DataFrame:
    """Per cold-start run: ``heldout_loss_drop`` (held-out loss at the start minus at the kept
    weights) and ``trained`` (1.0 when the drop is at least ``margin`` nats, else 0.0)."""
    cold = runs.filter(pl.col("init") == COLD)
    return fall_rows(cold, margin, RUN_KEYS, "init_val_loss", "val_loss", "heldout_loss_drop")


def train_fractions(params: dict) -> list[float]:
    """The train fractions the study runs, ascending: the configured ones and the full split."""
    return sorted({float(f) for f in params["fractions"]} | {FULL})


def claim_rows(runs: pl.DataFrame, main: str) -> list[dict[str, Any]]:
    """Seed rows of the claim frame: the main setting's arms at every train fraction."""
    rows: list[dict[str, Any]] = []

    def values(variant: str, init: str, metric: str) -> dict[tuple[float, int], float]:
        sub = runs.filter(
            (pl.col("variant") == variant) & (pl.col("init") == init) & (pl.col("metric") == metric)
        )
        return {(float(f), int(s)): v for f, s, v in sub.select("fraction", "seed", "value").rows()}

    arms = {
        "explicit": values(main, "explicit", "init_test_ppl"),
        "warm": values(main, "explicit", "test_ppl"),
        "cold": values(main, "random", "test_ppl"),
        "kn": values(KN, "kn", "test_ppl"),
    }
    for kind, vals in arms.items():
        rows += [{"arm": arm(kind, f), "seed": s, "metric": "test_ppl", "value": v}
                 for (f, s), v in sorted(vals.items())]  # fmt: skip
    warm, cold = values(main, "explicit", "test_loss"), values(main, "random", "test_loss")
    rows += [{"arm": arm("gain", f), "seed": s, "metric": "gain", "value": cold[(f, s)] - w}
             for (f, s), w in sorted(warm.items()) if (f, s) in cold]  # fmt: skip
    # a gain over a cold start that did not train is no gain: both arms carry its flag
    flags = values(main, COLD, TRAINED_METRIC)
    rows += [{"arm": arm(kind, f), "seed": s, "metric": TRAINED_METRIC, "value": v}
             for kind in ("cold", "gain") for (f, s), v in sorted(flags.items())]  # fmt: skip
    return rows


def aggregate_saffu(
    metrics: list[str], curves: list[str], kn_metrics: str, params: dict, out_dir: str,
    claims: str,
) -> None:  # fmt: skip
    out = Path(out_dir)
    runs = pl.concat([read_runs(metrics), read_runs([kn_metrics])], how="diagonal_relaxed")
    runs = runs.with_columns(pl.col("fraction").cast(pl.Float64))
    runs = pl.concat([runs, trained_rows(runs, params["trained_margin"])], how="diagonal_relaxed")
    write_parquet(runs, out / "saffu_runs.parquet")
    main, fractions = params["main_setting"], train_fractions(params)
    others = [s for s in params["settings"] if s != main]
    saffu = runs.filter(pl.col("variant") != KN)
    parts = [summarise(saffu.filter(pl.col("variant") == main),
                       {"variant": [main], "init": params["inits"], "fraction": fractions},
                       params["seeds"], group=[*GROUP, "metric"],
                       what="SAFFU runs (setting, init, fraction, seed)")]  # fmt: skip
    if others:
        parts.append(summarise(saffu.filter(pl.col("variant").is_in(others)),
                               {"variant": others, "init": params["inits"], "fraction": [FULL]},
                               params["ablation_seeds"], group=[*GROUP, "metric"],
                               what="SAFFU ablation runs (setting, init, fraction, seed)"))  # fmt: skip
    kn = summarise(runs.filter(pl.col("variant") == KN),
                   {"variant": [KN], "init": ["kn"], "fraction": fractions}, params["seeds"],
                   group=[*KN_GROUP, "metric"], what="Kneser-Ney runs (fraction, seed)")  # fmt: skip
    parts.append(kn)
    write_parquet(pl.concat(parts, how="diagonal_relaxed"), out / "saffu.parquet")
    write_parquet(kn.filter(pl.col("fraction") == FULL), out / "kneser_ney.parquet")
    curve = concat_parquet(curves)
    write_parquet(curve.sort("variant", "fraction", "init", "seed", "lr", "step"),
                  out / "saffu_curves.parquet")  # fmt: skip
    write_claim_frame(claims, seed_rows=claim_rows(runs, main))
