"""The probe macros (``\\Probe...``): every number the manuscript's probe prose cites.

Whatever groups a build holds, every macro of every known group is defined (as '--' when the
group is absent), so the manuscript compiles for any configuration.
"""

from __future__ import annotations

import math
import re

import polars as pl

from pillm.core.ridge_defaults import KAPPA_MAX
from pillm.paper.latex import MISSING, finite, fmt_num, fmt_range, mean_std, tex_escape
from pillm.probe.group_macros import fmt_pct, group_macros
from pillm.probe.rows import ProbeReport
from pillm.probe.summary import (
    argext,
    corpus_name,
    device_name,
    fmt_lr,
    group_key,
    is_proxy,
    join_words,
    massive_factor,
    ordinal,
    row_policy_words,
    unique,
)

_QUANT = re.compile(r"\bQ\d+_[0-9A-Z_]+\b")


def kappa_max_tex() -> str:
    """The probe fits' Cholesky threshold (they set none: the solver's default), as TeX math."""
    exp = math.log10(KAPPA_MAX)
    return f"10^{{{int(exp)}}}" if exp == int(exp) else f"{KAPPA_MAX:.3g}"


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
        "ProbeHubModels": hub_model_words(params.get("hub_models") or {}),
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
        "ProbeKappaMax": kappa_max_tex(),
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
    out.update(group_macros(rep))
    return out


def hub_model_words(hub_models: dict[str, str]) -> str:
    """The hub ids of ``probe.hub_models`` as the appendix lists them ('\\texttt{gpt2} and
    ...'), a pinned revision (``org/name@commit``) left out; 'none' for an empty map."""
    # a line may break after the organisation's slash: hub ids are long for a narrow column
    ids = [tex_escape(h.split("@")[0]).replace("/", "/\\allowbreak{}")
           for h in hub_models.values()]  # fmt: skip
    return join_words([f"\\texttt{{{i}}}" for i in ids])


def _row_macros(rep: ProbeReport) -> dict[str, str]:
    """The row policy, the outlier coordinates and the intervals: settings and extremes."""
    params, blocks = rep.params, _main_blocks(rep)
    out: dict[str, str] = {
        "ProbeRowPolicy": row_policy_words(params.get("rows")),
        "ProbeOutlierK": str(params.get("outlier_features", MISSING)),
        "ProbeBootResamples": str(params.get("bootstrap_resamples", MISSING)),
        "ProbeRefitResamples": str(params.get("refit_resamples", MISSING)),
        "ProbeMinBlocks": str(params.get("min_blocks", MISSING)),
        "ProbeExcludeMassive": massive_factor(params.get("rows")),
        "ProbeMassiveChange": fmt_num((params.get("rows") or {}).get("massive_change"), 2),
        "ProbeMassiveBlocks": str(sum(len(rep.massive_rows(g)) for g in rep.groups)),
        # "; " between models: each model's own list already joins with commas and "and"
        "ProbeMassiveBlocksWhere": "; ".join(
            _blocks_of(rep.label(g), [b["layer"] for b in rep.massive_rows(g)])
            for g in rep.groups if rep.massive_rows(g)
        ) or "none",
        "ProbeFitWindows": fmt_range(
            rep.probe["n_fit_windows"].min(), rep.probe["n_fit_windows"].max(), 0
        ),
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


def _blocks_of(label: str, layers: list[int]) -> str:
    """'SmolLM2, blocks 11 and 28'."""
    return f"{label}, block{'s' if len(layers) > 1 else ''} {join_words([str(x) for x in layers])}"


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
    out["ProbeFeatureGapInputCond"] = fmt_num(g["effective_rank"] if g else None, 1)
    out["ProbeFeatureGapMapRank"] = fmt_num(g["map_rank"] if g else None, 1)
    out["ProbeFeatureGapRlin"] = fmt_num(g["r2_lin"] if g else None, 3)
    # Input conditioning: the effective rank of W itself; map rank: of the map on a whitened
    # input (pillm.probe.fit.map_rank).
    ext("InputCondMin", "effective_rank", False, 1, blocks)
    ext("InputCondMax", "effective_rank", True, 1, blocks)
    ext("MapRankMin", "map_rank", False, 1, blocks)
    ext("MapRankMax", "map_rank", True, 1, blocks)

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
        # maps whose held-out R² did not rise by probe.gradient.trained_gain from the zero map's
        "ProbeGradUntrained": str(sum(1 for r in recs if r["grad_trained"] != 1)),
        "ProbeGradTrainedGain": fmt_num(rep.params.get("grad_trained_gain"), 2),
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
