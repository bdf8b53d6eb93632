"""The gradient opponents in the generative report: how many seeds of each AdamW arm trained
and flattened (generative.convergence), and the table and macros of the closed form against its
direct gradient opponent, AdamW on the output layer alone over the same features and pairs
(adamw_out.py). Used by tables.py."""

from __future__ import annotations

import polars as pl

from pillm.generative.convergence import MIN_LR_FRAC
from pillm.generative.labels import DATASETS, FAMILY_NAMES, macro, mean_ci
from pillm.paper.latex import MISSING, fmt_num

OUT_TABLE = (  # tables.TABLES entry: (label, colspec, header, caption)
    "tab:gen-adamw-out", "llrrrrrrrl",
    ["Data", "Pair", "Train pairs", "PIL MSE", "AdamW, 1 pass", "AdamW, at stop", "Passes",
     "Kept pass", "Capped", "Rate"],
    "The closed form against its direct gradient opponent: AdamW on the output layer alone, over "
    "the PIL fit's own frozen random features and its own training pairs (same seed; the same "
    "(input, target) pairs the solve streamed, train pairs), from the zero map, in shuffled "
    "passes over those pairs. Held-out MSE, mean over seeds $\\pm$ half-width of the 95\\,\\% "
    "$t$ interval: the PIL fit's; AdamW's after one pass (as many pairs seen as the solve) and "
    "at its kept pass (the lowest held-out MSE). Once its held-out MSE has flattened (its best "
    "improved by less than \\GenFlatTolPercent\\,\\% over \\GenFlatEvals{} passes) a run's "
    "rate falls by cosine to \\GenOutFloorPercent\\,\\% of its peak over \\GenOutAnnealEpochs{} "
    "more passes, then "
    "it stops; at most \\GenOutMaxEpochs{} passes in all (capped: seeds that hit the cap). "
    "Passes: mean "
    "(fewest--most) over seeds. Rate: the learning rate the first seed picked from "
    "\\GenOutLrGrid{} (extended past an edge pick by \\GenOutLrExtend{} per side) on "
    "held-out images, every seed trains it; (edge): the pick is still the grid's smallest or "
    "largest rate, so a better one may lie outside it.",
)  # fmt: skip


def _runs(runs: pl.DataFrame, dataset: str, setting: str) -> pl.DataFrame:
    return runs.filter((pl.col("dataset") == dataset) & (pl.col("setting") == setting))


def seeds_with(runs: pl.DataFrame, dataset: str, setting: str, flag: str) -> str:
    """'k/n': the seeds of ``setting`` whose record has ``flag`` (``trained``, ``flattened``,
    ``capped``) set; '--' for a setting that does not record it (a PIL fit)."""
    sub = _runs(runs, dataset, setting)
    if flag == "flattened" and _annealed(sub):
        # The output-layer arm anneals once its curve has flattened and then stops: the gains
        # of the anneal would read as "not flat" at its end, so it counts where the flat rule
        # started the anneal (a capped run never reached it).
        return f"{int((sub['anneal_from_epoch'] > 0).sum())}/{sub.height}"
    if flag not in sub.columns or not sub.height or sub[flag].is_null().all():
        return MISSING
    return f"{int((sub[flag] == 1).sum())}/{sub.height}"


def _annealed(sub: pl.DataFrame) -> bool:
    """Whether ``sub``'s runs record an anneal start (the output-layer arm)."""
    return (
        "anneal_from_epoch" in sub.columns
        and sub.height > 0
        and not sub["anneal_from_epoch"].is_null().all()
    )


def _stats(sub: pl.DataFrame, col: str) -> dict:
    """What labels.mean_ci reads: the mean, std and seed count of ``col``."""
    if col not in sub.columns or sub[col].is_null().all():
        return {"n_seeds": sub.height}
    return {col: sub[col].mean(), f"{col}_std": sub[col].std(), "n_seeds": sub.height}


def _passes(sub: pl.DataFrame) -> str:
    """'mean (fewest--most)' passes over the seeds."""
    lo, hi = int(sub["epochs_run"].min()), int(sub["epochs_run"].max())
    spread = "" if lo == hi else f" ({lo}--{hi})"
    return f"{fmt_num(sub['epochs_run'].mean(), 1)}{spread}"


def out_rows(runs: pl.DataFrame) -> list:
    """One row per (dataset, family) that ran the output-layer arm."""
    rows: list = []
    for ds in DATASETS:
        for fam in FAMILY_NAMES:
            out = _runs(runs, ds, f"{fam}_adamw_out")
            if not out.height:
                continue
            pil = _runs(runs, ds, f"{fam}_pil")
            rates = ", ".join(f"{x:g}" for x in sorted(set(out["adamw_lr"].to_list())))
            if "lr_on_edge" in out.columns and (out["lr_on_edge"] == 1).any():
                rates += " (edge)"
            rows.append([
                DATASETS[ds], FAMILY_NAMES[fam], fmt_num(out["train_pairs"].mean(), 0),
                mean_ci(_stats(pil, "heldout_mse"), "heldout_mse", 4),
                mean_ci(_stats(out, "heldout_mse_pass1"), "heldout_mse_pass1", 4),
                mean_ci(_stats(out, "heldout_mse"), "heldout_mse", 4), _passes(out),
                fmt_num(out["best_epoch"].mean(), 1), seeds_with(runs, ds, f"{fam}_adamw_out",
                                                                 "capped"), rates,
            ])  # fmt: skip
    return rows


def opponent_macros(runs: pl.DataFrame, g: dict) -> dict[str, str]:
    """The settings of the convergence rules and of the output-layer arm, and per known dataset
    and family (defined, '--', whatever the build ran): seeds trained and flattened of each
    AdamW arm ('k of n'), and the output-layer arm's mean passes and capped seeds."""
    gr, out = g["gradient"], g["adamw_out"]
    m = {
        macro("TrainedDropPercent"): fmt_num(100 * gr["trained_drop"], 0),
        macro("FlatEvals"): str(gr["flat_evals"]),
        macro("FlatTolPercent"): fmt_num(100 * gr["flat_tol"], 1),
        macro("OutLrGrid"): ", ".join(f"{x:g}" for x in out["lr_grid"]),
        macro("OutMaxEpochs"): str(out["max_epochs"]),
        macro("OutAnnealEpochs"): str(out["anneal_epochs"]),
        macro("OutFloorPercent"): fmt_num(100 * MIN_LR_FRAC, 0),
        macro("OutLrExtend"): str(out["lr_extend"]),
    }
    for ds in DATASETS:
        for fam in FAMILY_NAMES:
            for method, part in (("adamw", "Adamw"), ("adamw_out", "Out")):
                for flag, name in (("trained", "Trained"), ("flattened", "Flat")):
                    k = seeds_with(runs, ds, f"{fam}_{method}", flag)
                    m[macro(ds, fam, part + name)] = k.replace("/", " of ")
            out = _runs(runs, ds, f"{fam}_adamw_out")
            passes = out["epochs_run"].mean() if "epochs_run" in out.columns else None
            m[macro(ds, fam, "OutPasses")] = MISSING if passes is None else fmt_num(passes, 1)
            capped = seeds_with(runs, ds, f"{fam}_adamw_out", "capped")
            m[macro(ds, fam, "OutCapped")] = capped.replace("/", " of ")
    return m
