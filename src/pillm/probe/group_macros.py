"""The per-model-group probe macros (``\\Probe<Group>...``), for every known group and every group
in the data ('--' for a known group the build lacks, so the manuscript compiles for any build).

A correlation's interval macro (``...CI``) reads '[lo, hi], too few blocks' where the estimate
has too few blocks for a direction (``pillm.probe.correlations.too_few``); its ``...N`` macro is
the blocks of one model (of one seed where a group has several: the correlation is computed
within each seed and averaged over seeds). ``SwapVerdict`` says whether the swap claim is
evaluated, and why not.
"""

from __future__ import annotations

from pillm.paper.latex import MISSING, fmt_num, fmt_pm
from pillm.probe import correlations
from pillm.probe.intervals import Estimate
from pillm.probe.rows import ProbeReport, fmt_ci
from pillm.probe.summary import KNOWN_GROUPS, fmt_r, group_macro

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
    # rows, outlier coordinates, within-model correlations with intervals
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
    "InputCondSpearman",
    "InputCondSpearmanCI",
    "MapRank",
    "MapRankSpearman",
    "MapRankSpearmanCI",
    "SwapSpearmanCI",
    "SwapSpearmanAll",
    "SwapSpearmanAllCI",
    "SwapSpearmanN",
    "SwapSpearmanDiff",
    "SwapSpearmanDiffCI",
    "SwapVerdict",
    "MassiveBlocks",
]
VERDICT_WORDS = {
    None: "evaluated",
    correlations.TOO_FEW: "too few blocks",
    correlations.BOTH_NULL: "not evaluated: both correlations are indistinguishable from zero",
}


def fmt_pct(share: float | None) -> str:
    """A share as a percentage with no decimals: 0.917 -> '92'."""
    return fmt_num(None if share is None else 100 * share, 0)


def _ci(rep: ProbeReport, est: Estimate) -> str:
    """The interval of a correlation, flagged where it has too few blocks for a direction."""
    ci = fmt_ci(est.lo, est.hi, 2)
    if est.value is None or not rep.too_few(est):
        return ci
    return "too few blocks" if ci == MISSING else f"{ci}, too few blocks"


def group_macros(rep: ProbeReport) -> dict[str, str]:
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
                p + "PearsonCI": _ci(rep, s["pearson"]),
                p + "PearsonN": str(s["pearson"].per_seed),
                p + "LinSwapBest": fmt_num(s["lin_best"], dd),
                p + "LinSwapBestBlock": fmt_num(s["lin_best_layer"], 0),
                p + "LinSwapWorst": fmt_num(s["lin_worst"], dd),
                p + "LinSwapWorstBlock": fmt_num(s["lin_worst_layer"], 0),
                p + "LowRankSwapBest": fmt_num(s["lr_best"], dd),
                p + "LowRankSwapBestBlock": fmt_num(s["lr_best_layer"], 0),
                p + "Intact": fmt_num(s["base"], dd),
                p + "SwapSpearman": fmt_r(s["swap_spearman"].value),
                p + "SwapSpearmanCI": _ci(rep, s["swap_spearman"]),
                p + "SwapSpearmanAll": fmt_r(s["swap_spearman_all"].value),
                p + "SwapSpearmanAllCI": _ci(rep, s["swap_spearman_all"]),
                p + "SwapSpearmanN": str(s["swap_spearman"].per_seed),
                p + "SwapSpearmanDiff": fmt_r(s["swap_diff"].value),
                p + "SwapSpearmanDiffCI": _ci(rep, s["swap_diff"]),
                p + "SwapVerdict": VERDICT_WORDS[s["swap_guard"]]
                if s["swap_diff"].value is not None
                else MISSING,
                p + "InputCondSpearman": fmt_r(s["input_rho"].value),
                p + "InputCondSpearmanCI": _ci(rep, s["input_rho"]),
                p + "MapRank": fmt_num(s["map_rank"], 1),
                p + "MapRankSpearman": fmt_r(s["map_rho"].value),
                p + "MapRankSpearmanCI": _ci(rep, s["map_rho"]),
                p + "MassiveBlocks": str(s["massive_blocks"]),
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
