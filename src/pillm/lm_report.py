"""The LM experiments' tables and macros (seed Tables 1-4, PIL targets, contribution analysis).

Inputs are the polars summaries; every cell is formatted here. Comparisons against a reference
variant are paired by seed (a PIL variant of seed s starts from the reference run of seed s), and
the paired t-test says whether a difference is distinguishable from seed noise.
"""

from __future__ import annotations

import math
import re
from typing import Any

import polars as pl
from scipy import stats

from .tables import fmt_num, fmt_pm, metric_table
from .variants import VARIANTS

TARGET_VARIANTS = ["attn_then_pil", "attn_then_tp", "attn_then_distill", "attn_then_fgrad"]
STRATEGY_VARIANTS = ["pil_then_attn", "attn_then_pil", "attn_then_tp", "pil_pure"]
FEATURE_VARIANTS = ["refit_single", "refit", "refit_single8d"]
WIDTH_SWEEP = {  # single-projection refits: variant -> feature width in units of d
    "refit_single1d": 1,
    "refit_single2d": 2,
    "refit_single": 4,
    "refit_single8d": 8,
    "refit_single16d": 16,
}
FEATURE_WIDTH = {
    "refit_single": "$4d$ (1 proj.)",
    "refit": "$2{\\times}4d$ (Bi-PIL)",
    "refit_single8d": "$8d$ (1 proj.)",
}


def per_seed(runs: pl.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """{variant: {seed: value}} of one metric."""
    out: dict[str, dict[int, float]] = {}
    for r in runs.filter(pl.col("metric") == metric).iter_rows(named=True):
        out.setdefault(r["variant"], {})[int(r["seed"])] = r["value"]
    return out


def mean_std(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return mean, std


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], float | None]:
    """Differences a - b over common seeds and the two-sided paired t-test p-value (n >= 2)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        return diffs, None
    return diffs, float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def fmt_p(p: float | None) -> str:
    if p is None:
        return "--"
    return "$<$0.001" if p < 0.001 else f"{p:.3f}"


class LMReport:
    def __init__(
        self, summary: pl.DataFrame, runs: pl.DataFrame, variants: list[str], unigram_loss: float
    ):
        self.variants = variants
        self.unigram = unigram_loss
        self.m: dict[str, dict[str, dict[str, Any]]] = metric_table(summary)
        self.loss = per_seed(runs, "test_loss")
        self.ppl = per_seed(runs, "test_ppl")

    def has(self, *names: str) -> bool:
        return all(n in self.variants and n in self.m for n in names)

    def pm(self, variant: str, metric: str, digits: int = 1, scale: float = 1.0) -> str:
        r = self.m[variant].get(metric)
        if r is None:
            return "--"
        std = None if r["std"] is None else r["std"] * scale
        return fmt_pm(r["mean"] * scale, std, digits)

    def mean(self, variant: str, metric: str) -> float:
        return self.m[variant][metric]["mean"]

    def main_rows(self) -> list[list[str]]:
        rows = []
        for v in self.variants:
            r = self.m[v]
            rows.append(
                [
                    VARIANTS[v].label,
                    fmt_num(self.mean(v, "params_trainable") / 1e6, 2),
                    fmt_num(self.mean(v, "params_solved") / 1e6, 2),
                    self.pm(v, "grad_time_s", 1),
                    self.pm(v, "solve_time_s", 2),
                    self.pm(v, "test_ppl", 1),
                    self.pm(v, "test_acc", 1, 100),
                    self.pm(v, "test_bpb", 3),
                    self.pm(v, "lambada_acc", 1, 100),
                    f"{r['test_ppl']['n']}/{r['test_ppl']['n_expected']}",
                ]
            )
        return rows

    def share(self, variant: str) -> tuple[float, float | None]:
        """Loss-based share (L_uni - L_v) / (L_uni - L_full), per seed, then mean and std."""
        full = self.loss["baseline"]
        vals = [
            (self.unigram - self.loss[variant][s]) / (self.unigram - full[s])
            for s in sorted(set(full) & set(self.loss[variant]))
        ]
        return mean_std(vals)

    def ratio(self, variant: str) -> tuple[float, float | None]:
        """The seed outline's measure: PPL_full / PPL_variant, per seed, then mean and std."""
        full = self.ppl["baseline"]
        return mean_std(
            [full[s] / self.ppl[variant][s] for s in sorted(set(full) & set(self.ppl[variant]))]
        )

    def contribution_rows(self) -> list[list[str]]:
        rows = [["Unigram (train counts)", fmt_num(math.exp(self.unigram), 1), "--", "0.0"]]
        for v in ("baseline", "attn_only", "ffn_only"):
            if self.has(v):
                r_mean, r_std = self.ratio(v)
                s_mean, s_std = self.share(v)
                rows.append(
                    [
                        VARIANTS[v].label,
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(100 * r_mean, _s(r_std), 1),
                        fmt_pm(100 * s_mean, _s(s_std), 1),
                    ]
                )
        return rows

    def feature_rows(self) -> list[list[str]]:
        rows = []
        for v in FEATURE_VARIANTS:
            if self.has(v, "baseline"):
                diffs, p = paired(self.ppl[v], self.ppl["baseline"])
                d_mean, d_std = mean_std(diffs)
                rows.append(
                    [
                        FEATURE_WIDTH[v],
                        fmt_num(self.mean(v, "params_solved") / 1e6, 2),
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(d_mean, d_std, 2),
                        self.pm(v, "solve_time_s", 2),
                        f"{self.mean(v, 'kappa_max'):.1e}",
                    ]
                )
        return rows

    def strategy_rows(self) -> list[list[str]]:
        return [
            [
                VARIANTS[v].label,
                self.pm(v, "test_ppl", 1),
                self.pm(v, "test_acc", 1, 100),
                self.pm(v, "train_time_s", 1),
            ]
            for v in STRATEGY_VARIANTS
            if self.has(v)
        ]

    def target_comparison(
        self, variant: str, reference: str
    ) -> tuple[float, float | None, float | None]:
        """Test-loss change vs the reference (negative = better), its std and paired p-value."""
        diffs, p = paired(self.loss[variant], self.loss[reference])
        mean, std = mean_std(diffs)
        return mean, std, p

    def target_rows(self) -> list[list[str]]:
        rows = []
        pairs = [(v, "attn_only") for v in TARGET_VARIANTS] + [(v, "baseline") for v in ("refit",)]
        for v, ref in pairs:
            if self.has(v, ref):
                d, s, p = self.target_comparison(v, ref)
                rows.append(
                    [
                        VARIANTS[v].label,
                        VARIANTS[ref].label,
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(d, s, 4),
                        fmt_p(p),
                    ]
                )
        return rows

    def beats_attn_only(self) -> list[str]:
        """Targets whose paired loss is lower than attention-only's at p < 0.05."""
        out = []
        for v in TARGET_VARIANTS:
            if self.has(v, "attn_only"):
                d, _, p = self.target_comparison(v, "attn_only")
                if d < 0 and p is not None and p < 0.05:
                    out.append(v)
        return out


def _s(x: float | None) -> float | None:
    return None if x is None else 100 * x


NUMBER_WORDS = {"1": "One", "2": "Two", "4": "Four", "8": "Eight", "16": "Sixteen"}


def macro_name(variant: str) -> str:
    """refit_single16d -> RefitSingleSixteenD: LaTeX macro names take letters only."""
    name = variant.title().replace("_", "")
    return re.sub(r"\d+", lambda m: NUMBER_WORDS[m.group()], name)


def lm_numbers(rep: LMReport) -> dict[str, str]:
    """Macros for every variant (PPL, accuracy, LAMBADA, times) and the headline comparisons."""
    out: dict[str, str] = {}
    for v in rep.variants:
        name = macro_name(v)
        out[f"PPL{name}"] = rep.pm(v, "test_ppl", 1)
        out[f"Acc{name}"] = rep.pm(v, "test_acc", 1, 100)
        out[f"Lambada{name}"] = rep.pm(v, "lambada_acc", 1, 100)
        out[f"Solve{name}"] = rep.pm(v, "solve_time_s", 2)
        out[f"Grad{name}"] = rep.pm(v, "grad_time_s", 1)
    out["UnigramPPL"] = fmt_num(math.exp(rep.unigram), 1)
    if rep.has("baseline", "attn_only"):
        r, rs = rep.ratio("attn_only")
        s, ss = rep.share("attn_only")
        out["RatioAttnOnly"] = fmt_pm(100 * r, _s(rs), 1)
        out["ShareAttnOnly"] = fmt_pm(100 * s, _s(ss), 1)
    if rep.has("baseline", "ffn_only"):
        s, ss = rep.share("ffn_only")
        out["ShareFfnOnly"] = fmt_pm(100 * s, _s(ss), 1)
    winners = rep.beats_attn_only()
    out["NumTargetsBeatAttnOnly"] = str(len(winners))
    out["TargetsBeatAttnOnly"] = ", ".join(VARIANTS[v].label for v in winners) or "none"
    for v in TARGET_VARIANTS:
        if rep.has(v, "attn_only"):
            d, s, p = rep.target_comparison(v, "attn_only")
            out[f"DeltaLoss{macro_name(v)}"] = fmt_pm(d, s, 4)
            out[f"PValue{macro_name(v)}"] = fmt_p(p)
    return out
