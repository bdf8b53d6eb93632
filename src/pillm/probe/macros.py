"""The probe macros (``\\Probe...``): every number the manuscript's probe prose cites.

Whatever groups a build holds, every macro of every known group is defined (as '--' when the
group is absent), so the manuscript compiles for any configuration.
"""

from __future__ import annotations

import re

import polars as pl

from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, fmt_range, mean_std, tex_escape
from pillm.probe.rows import ProbeReport, fmt_ci
from pillm.probe.summary import (
    KNOWN_GROUPS,
    argext,
    corpus_name,
    device_name,
    fmt_lr,
    fmt_r,
    group_key,
    group_macro,
    is_proxy,
    join_words,
    ordinal,
    unique,
)


def fmt_pct(share: float | None) -> str:
    """A share as a percentage with no decimals: 0.917 -> '92'."""
    return fmt_num(None if share is None else 100 * share, 0)


def row_policy_words(rows: dict | None) -> str:
    """The row policy in words, from the config's probe.rows: 'special-token rows and
    position-0 rows', 'no rows'."""
    if not rows:
        return MISSING
    parts = ["special-token rows"] if rows.get("exclude_special", True) else []
    pos = [int(p) for p in rows.get("exclude_positions", [])]
    if pos:
        names = join_words([str(p) for p in pos])
        parts.append(f"the rows at window position{'s' if len(pos) > 1 else ''} {names}")
    massive = float(rows.get("exclude_massive", 0) or 0)
    if massive > 0:
        parts.append(
            "in each block the rows whose FFN output norm exceeds "
            f"{fmt_num(massive, 0 if massive == int(massive) else 1)} times the median row of "
            "their batch (massive activations of attention sinks elsewhere in the window)"
        )
    return join_words(parts, empty="no rows")


_QUANT = re.compile(r"\bQ\d+_[0-9A-Z_]+\b")
GROUP_MACRO_SUFFIXES = [
    "Label",
    "Blocks",
    "Rlin",
    "RlinMin",
    "RlinMax",
    "FeatureMedian",
    "BilinearGain",
    "Pearson",
    "LinSwapBest",
    "LinSwapBestBlock",
    "LinSwapWorst",
    "LinSwapWorstBlock",
    "LowRankSwapBest",
    "LowRankSwapBestBlock",
    "Intact",
    "SwapSpearman",
    "CorpusSpread",
    "GradGap",
    # issue #15: rows, outlier coordinates, within-model correlations with intervals
    "RlinAll",
    "ExcludedShareMean",
    "ExcludedShareMax",
    "ExcludedShareMaxBlock",
    "RlinDropMax",
    "RlinDropMaxBlock",
    "RlinDropMaxKept",
    "RlinDropMaxAll",
    "OutlierShareMean",
    "OutlierShareMax",
    "OutlierShareMaxBlock",
    "OutlierShareMaxRlin",
    "OutlierShareMaxRest",
    "NoOutliers",
    "PearsonCI",
    "PearsonN",
    "RankSpearman",
    "RankSpearmanCI",
    "SwapSpearmanCI",
    "SwapSpearmanAll",
    "SwapSpearmanAllCI",
    "SwapSpearmanN",
    "SwapSpearmanDiff",
    "SwapSpearmanDiffCI",
]


def _group_macros(rep: ProbeReport) -> dict[str, str]:
    """Per-group macros for every known group and every group in the data."""
    out: dict[str, str] = {}
    names = {KNOWN_GROUPS[k]: None for k in KNOWN_GROUPS}
    names.update({group_macro(g): g for g in rep.groups})
    for name, g in names.items():
        p = f"Probe{name}"
        if g is None:
            for suffix in GROUP_MACRO_SUFFIXES:
                out[p + suffix] = MISSING
            continue
        s, dd = rep.group_stats(g), rep.delta_digits(g)
        out.update(
            {
                p + "Label": rep.label(g),
                p + "Blocks": fmt_num(s["blocks"], 0),
                p + "Rlin": fmt_pm(s["rlin"], s["rlin_std"], 3),
                p + "RlinMin": fmt_num(s["rlin_min"], 3),
                p + "RlinMax": fmt_num(s["rlin_max"], 3),
                p + "FeatureMedian": fmt_num(s["feature_median"], 3),
                p + "BilinearGain": fmt_num(s["gain"], 3),
                p + "Pearson": fmt_r(s["pearson"].value),
                p + "PearsonCI": fmt_ci(s["pearson"].lo, s["pearson"].hi, 2),
                p + "PearsonN": str(s["pearson"].n),
                p + "LinSwapBest": fmt_num(s["lin_best"], dd),
                p + "LinSwapBestBlock": fmt_num(s["lin_best_layer"], 0),
                p + "LinSwapWorst": fmt_num(s["lin_worst"], dd),
                p + "LinSwapWorstBlock": fmt_num(s["lin_worst_layer"], 0),
                p + "LowRankSwapBest": fmt_num(s["lr_best"], dd),
                p + "LowRankSwapBestBlock": fmt_num(s["lr_best_layer"], 0),
                p + "Intact": fmt_num(s["base"], dd),
                p + "SwapSpearman": fmt_r(s["swap_spearman"].value),
                p + "SwapSpearmanCI": fmt_ci(s["swap_spearman"].lo, s["swap_spearman"].hi, 2),
                p + "SwapSpearmanAll": fmt_r(s["swap_spearman_all"].value),
                p + "SwapSpearmanAllCI": fmt_ci(
                    s["swap_spearman_all"].lo, s["swap_spearman_all"].hi, 2
                ),
                p + "SwapSpearmanN": str(s["swap_spearman"].n),
                p + "SwapSpearmanDiff": fmt_r(s["swap_diff"].value),
                p + "SwapSpearmanDiffCI": fmt_ci(s["swap_diff"].lo, s["swap_diff"].hi, 2),
                p + "RankSpearman": fmt_r(s["rank_rho"].value),
                p + "RankSpearmanCI": fmt_ci(s["rank_rho"].lo, s["rank_rho"].hi, 2),
                p + "RlinAll": fmt_num(s["rlin_all"], 3),
                p + "ExcludedShareMean": fmt_pct(s["excl_mean"]),
                p + "ExcludedShareMax": fmt_pct(s["excl_max"]),
                p + "ExcludedShareMaxBlock": fmt_num(s["excl_max_layer"], 0),
                p + "RlinDropMax": fmt_num(s["drop_max"], 3),
                p + "RlinDropMaxBlock": fmt_num(s["drop_max_layer"], 0),
                p + "RlinDropMaxKept": fmt_num(s["drop_max_rlin"], 3),
                p + "RlinDropMaxAll": fmt_num(s["drop_max_rlin_all"], 3),
                p + "OutlierShareMean": fmt_pct(s["outlier_mean"]),
                p + "OutlierShareMax": fmt_pct(s["outlier_max"]),
                p + "OutlierShareMaxBlock": fmt_num(s["outlier_max_layer"], 0),
                p + "OutlierShareMaxRlin": fmt_num(s["outlier_max_rlin"], 3),
                p + "OutlierShareMaxRest": fmt_num(s["outlier_max_rest"], 3),
                p + "NoOutliers": fmt_num(s["no_outliers"], 3),
                p + "CorpusSpread": fmt_num(s["spread"], 3),
                p + "GradGap": fmt_num(s["grad_gap"], 3),
            }
        )
    return out


def probe_macros(rep: ProbeReport) -> dict[str, str]:
    """Macro name (without backslash) -> formatted value."""
    params, probe = rep.params, rep.probe
    main = probe.filter(pl.col("corpus").eq_missing(rep.main))
    out: dict[str, str] = {
        "ProbeMainCorpus": corpus_name(rep.main) if rep.main else MISSING,
        "ProbeCorpora": join_words([corpus_name(c) for c in rep.corpora]),
        "ProbeNumCorpora": str(len(rep.corpora)),
        "ProbeSwapCorpora": join_words(
            [
                corpus_name(c)
                for c in rep.corpora
                if probe.filter(
                    (pl.col("corpus") == c) & pl.col("delta_linear").is_not_null()
                ).height
            ]
        ),
        "ProbeModels": join_words([rep.label(g, seeds=True) for g in rep.groups]),
        "ProbeNumModels": str(len(rep.groups)),
        "ProbePretrainedModels": join_words(
            [rep.label(g) for g in rep.groups if group_key(g) != "pillm"]
        ),
        "ProbeEncoderModels": join_words([rep.label(g) for g in rep.groups if rep.proxy(g)]),
        "ProbeQuantModels": join_words(
            [rep.label(g) for g in rep.groups if _QUANT.search(rep.labels[g])]
        ),
        "ProbePillmSeeds": str(rep.n_models["pillm"]) if "pillm" in rep.groups else MISSING,
        "ProbeNumBlocks": str(main.select("model", "layer").unique().height),
        "ProbeNumFits": str(probe.height),
        "ProbeNumEigh": str(probe.filter(pl.col("solver") == "eigh").height),
        "ProbeNumCholesky": str(probe.filter(pl.col("solver") == "cholesky").height),
        "ProbeBilinearRank": str(params.get("bilinear_rank", MISSING)),
        "ProbeBilinearRankUsed": fmt_range(
            probe["bilinear_rank"].min(), probe["bilinear_rank"].max(), 0
        ),
        "ProbeLowRankFactor": str(params.get("low_rank_factor", MISSING)),
        "ProbeHoldoutEvery": ordinal(int(params.get("holdout_every", 5))),
        "ProbeTrainRows": fmt_range(probe["n_train_rows"].min(), probe["n_train_rows"].max(), 0),
        "ProbeHeldoutRows": fmt_range(
            probe["n_heldout_rows"].min(), probe["n_heldout_rows"].max(), 0
        ),
        "ProbeHeldoutPct": fmt_num(
            mean_std(
                100 * r["n_heldout_rows"] / (r["n_heldout_rows"] + r["n_train_rows"])
                for r in probe.select("n_train_rows", "n_heldout_rows").to_dicts()
                if r["n_train_rows"] is not None and r["n_heldout_rows"]
            )[0],
            1,
        ),
    }
    out.update(_row_macros(rep))
    out.update(_result_macros(rep))
    out.update(_gradient_macros(rep))
    out.update(_cost_macros(rep))
    out.update(_group_macros(rep))
    return out


def _row_macros(rep: ProbeReport) -> dict[str, str]:
    """The row policy, the outlier coordinates and the intervals: settings and extremes."""
    params, blocks = rep.params, _main_blocks(rep)
    out: dict[str, str] = {
        "ProbeRowPolicy": row_policy_words(params.get("rows")),
        "ProbeOutlierK": str(params.get("outlier_features", MISSING)),
        "ProbeBootResamples": str(params.get("bootstrap_resamples", MISSING)),
        "ProbeHeldoutWindows": fmt_range(
            rep.probe["n_heldout_windows"].min() if "n_heldout_windows" in rep.probe.columns
            else None,
            rep.probe["n_heldout_windows"].max() if "n_heldout_windows" in rep.probe.columns
            else None,
            0,
        ),
    }  # fmt: skip
    for name, col in [("ExcludedShareMax", "excluded_share"), ("OutlierShareMax", "outlier_share")]:
        r = argext(blocks, col, largest=True)
        out[f"Probe{name}"] = fmt_pct(r[col] if r else None)
        out[f"Probe{name}Where"] = rep.where(r["model_group"], r["layer"]) if r else MISSING
    return out


def _main_blocks(rep: ProbeReport) -> list[dict]:
    if rep.blocks.height == 0:
        return []
    return rep.blocks.filter(pl.col("corpus").eq_missing(rep.main)).to_dicts()


def _result_macros(rep: ProbeReport) -> dict[str, str]:
    blocks = _main_blocks(rep)
    raw = rep.probe.filter(pl.col("corpus").eq_missing(rep.main)).to_dicts()
    out: dict[str, str] = {}

    def ext(name: str, col: str, largest: bool, digits: int, rows: list[dict]) -> None:
        r = argext(rows, col, largest)
        out[f"Probe{name}"] = fmt_num(r[col] if r else None, digits)
        out[f"Probe{name}Where"] = rep.where(r["model_group"], r["layer"]) if r else MISSING

    ext("RlinMin", "r2_lin", False, 3, blocks)
    ext("RlinMax", "r2_lin", True, 3, blocks)

    # Largest change of R²_lin between adjacent blocks of one model (seed means).
    jumps, profiles, non_monotone = [], 0, 0
    for g in rep.groups:
        b = rep.block_rows(g, rep.main)
        vals = [(x["layer"], x["r2_lin"]) for x in b if finite(x["r2_lin"])]
        for (l0, v0), (l1, v1) in zip(vals, vals[1:], strict=False):
            jumps.append({"model_group": g, "layer": l0, "next": l1, "jump": abs(v1 - v0)})
        if len(vals) >= 3:
            profiles += 1
            diffs = [v1 - v0 for (_, v0), (_, v1) in zip(vals, vals[1:], strict=False)]
            non_monotone += int(any(d > 0 for d in diffs) and any(d < 0 for d in diffs))
    j = argext(jumps, "jump", largest=True)
    out["ProbeAdjacentJump"] = fmt_num(j["jump"] if j else None, 3)
    out["ProbeAdjacentJumpWhere"] = (
        f"{rep.label(j['model_group'])}, blocks {j['layer']}--{j['next']}" if j else MISSING
    )
    out["ProbeNumProfiles"] = str(profiles)
    out["ProbeNumNonMonotone"] = str(non_monotone)

    # Bilinear probe: its mean gain over all blocks; correlations only per model (group macros).
    gains = [r["bilinear_gain"] for r in raw]
    out["ProbeBilinearGainMean"] = fmt_num(mean_std(gains)[0], 3)
    ext("BilinearGainMax", "bilinear_gain", True, 3, blocks)

    # Global vs per-feature R².
    gaps = [
        {**b, "gap": b["r2_lin"] - b["r2_feature_median"]}
        for b in blocks
        if finite(b["r2_lin"]) and finite(b["r2_feature_median"])
    ]
    g = argext(gaps, "gap", largest=True)
    out["ProbeFeatureGapMax"] = fmt_num(g["gap"] if g else None, 3)
    out["ProbeFeatureGapMaxWhere"] = rep.where(g["model_group"], g["layer"]) if g else MISSING
    out["ProbeFeatureGapRank"] = fmt_num(g["effective_rank"] if g else None, 1)
    out["ProbeFeatureGapRlin"] = fmt_num(g["r2_lin"] if g else None, 3)
    ext("EffRankMin", "effective_rank", False, 1, blocks)
    ext("EffRankMax", "effective_rank", True, 1, blocks)

    # Swaps: causal models (ΔPPL) and encoders (proxy) are never pooled.
    causal = [b for b in blocks if not is_proxy(b["kind"], b["swap_metric"])]
    enc = [b for b in blocks if is_proxy(b["kind"], b["swap_metric"])]
    ext("LinSwapBest", "delta_linear", False, 2, causal)
    ext("LinSwapWorst", "delta_linear", True, 2, causal)
    ext("LowRankSwapBest", "delta_lowrank", False, 2, causal)
    ext("LowRankSwapWorst", "delta_lowrank", True, 2, causal)
    ext("ProxySwapBest", "delta_linear", False, 4, enc)
    ext("ProxySwapWorst", "delta_linear", True, 4, enc)
    stats_ = [rep.group_stats(g) for g in rep.groups]
    for name, key in [
        ("LinParamsRatio", "ffn_lin"),
        ("LowRankParamsRatio", "ffn_lr"),
        ("LinLowRankRatio", "lin_lr"),
    ]:
        vals = [s[key] for s in stats_ if finite(s[key])]
        out[f"Probe{name}"] = fmt_range(min(vals), max(vals), 1) if vals else MISSING

    # Corpora.
    spreads = [
        {"model_group": g, "layer": s[1], "spread": s[0]}
        for g in rep.groups
        if (s := rep.corpus_spread(g))
    ]
    sp = argext(spreads, "spread", largest=True)
    out["ProbeCorpusSpreadMax"] = fmt_num(sp["spread"] if sp else None, 3)
    out["ProbeCorpusSpreadMaxWhere"] = rep.where(sp["model_group"], sp["layer"]) if sp else MISSING
    return out


def _gradient_macros(rep: ProbeReport) -> dict[str, str]:
    g = rep.probe.filter(pl.col("grad_r2").is_not_null())
    recs = g.to_dicts()
    out = {
        "ProbeGradSteps": "/".join(fmt_num(v, 0) for v in unique(g["grad_steps"].to_list()))
        or MISSING,
        "ProbeGradRows": "/".join(fmt_num(v, 0) for v in unique(g["grad_rows"].to_list()))
        or MISSING,
        "ProbeGradLR": "/".join(fmt_lr(v) for v in unique(g["grad_lr"].to_list())) or MISSING,
        "ProbeGradNum": str(len(recs)),
        "ProbeGradBelow": str(
            sum(
                1
                for r in recs
                if finite(r["grad_closed_r2"]) and r["grad_r2"] < r["grad_closed_r2"]
            )
        ),
    }
    gaps = [
        {**r, "gap": r["grad_closed_r2"] - r["grad_r2"]}
        for r in recs
        if finite(r["grad_closed_r2"]) and finite(r["grad_r2"])
    ]
    hi = argext(gaps, "gap", largest=True)
    lo = argext(gaps, "gap", largest=False)
    out["ProbeGradGapMax"] = fmt_num(hi["gap"] if hi else None, 3)
    out["ProbeGradGapMaxWhere"] = rep.where(hi["model_group"], hi["layer"]) if hi else MISSING
    out["ProbeGradGapMin"] = fmt_num(lo["gap"] if lo else None, 3)
    out["ProbeGradGapMean"] = fmt_num(mean_std(r["gap"] for r in gaps)[0], 3)
    return out


def _cost_macros(rep: ProbeReport) -> dict[str, str]:
    jobs = rep.jobs.to_dicts()
    total = sum(
        sum(r[c] for c in ("load_seconds", "capture_fit_seconds", "swap_seconds") if finite(r[c]))
        for r in jobs
    )
    rps = [r["rows_per_s"] for r in jobs if finite(r["rows_per_s"])]
    mem = [r["peak_mem_mb"] for r in jobs if finite(r["peak_mem_mb"])]
    return {
        "ProbeDevices": tex_escape(" / ".join(sorted(unique(device_name(r) for r in jobs))))
        or MISSING,
        "ProbeNumJobs": str(len(jobs)),
        "ProbeTotalMinutes": fmt_num(total / 60, 1) if jobs else MISSING,
        "ProbeRowsPerSec": fmt_range(min(rps), max(rps), 0) if rps else MISSING,
        "ProbePeakMem": fmt_num(max(mem), 0) if mem else MISSING,
    }
