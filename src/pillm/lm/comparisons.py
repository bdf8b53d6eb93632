"""The LM study's paired comparisons: the summary per variant and metric, per-seed values paired
by seed, and the table rows they make (``LMReport``).

Every "a ± b" is the mean over seeds ± the half-width of its 95 % t interval
(``pillm.paper.tidy.ci95``); with one seed there is no interval and the mean stands alone.
Differences between variants (loss share, perplexity ratio, Δ loss) are taken per seed first,
over the seeds both runs have, then summarised the same way; their p-values are two-sided paired
t-tests.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from scipy import stats

from pillm.lm.feature_maps import shape, shape_tex, width_sweep
from pillm.lm.labels import LABELS
from pillm.lm.variants import VARIANTS
from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, mean_std
from pillm.paper.tidy import ci95, loss_share

# The variants each table compares (those a build did not run are left out of its rows).
TARGET_VARIANTS = ["attn_then_pil", "attn_then_tp", "attn_then_distill", "attn_then_fgrad"]
STRATEGY_VARIANTS = [
    "pil_then_attn",
    "pil_random_out_attn",
    "frozen_ffn_attn",
    "attn_then_pil",
    "attn_then_tp",
    "pil_pure",
]
CONTRIBUTION_VARIANTS = ["baseline", "attn_only", "attn_only_matched", "ffn_only", "linear_ffn"]
FEATURE_VARIANTS = ["refit_single", "refit", "refit_single8d"]
WIDTH_SWEEP = width_sweep()  # single-projection refits: variant -> feature width in units of d
FEATURE_WIDTH = {  # the features table's first column
    v: f"${shape_tex(v)}$ " + ("(1 proj.)" if shape(v)[0] == 1 else "(Bi-PIL)")
    for v in FEATURE_VARIANTS
}


def metric_table(summary: pl.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """{variant: {metric: {mean, std, ci95, n, n_expected}}} from the lm summary."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in summary.iter_rows(named=True):
        out.setdefault(row["variant"], {})[row["metric"]] = row
    return out


def per_seed(runs: pl.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """{variant: {seed: value}} of one metric."""
    out: dict[str, dict[int, float]] = {}
    for r in runs.filter(pl.col("metric") == metric).iter_rows(named=True):
        out.setdefault(r["variant"], {})[int(r["seed"])] = r["value"]
    return out


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], float | None]:
    """Differences a - b over common seeds and the two-sided paired t-test p-value (n >= 2)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        return diffs, None
    return diffs, float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def mean_ci(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and 95 % t-interval half-width of per-seed values (None below two values)."""
    mean, std = mean_std(xs)
    return mean, ci95(std, sum(1 for x in xs if finite(x)))


def percent(x: float | None) -> float | None:
    """100 x, None kept: a share or ratio (or its interval) in percent."""
    return None if x is None else 100 * x


def fmt_p(p: float | None) -> str:
    if p is None:
        return MISSING
    return "$<$0.001" if p < 0.001 else f"{p:.3f}"


class LMReport:
    def __init__(
        self, summary: pl.DataFrame, runs: pl.DataFrame, variants: list[str], unigram_loss: float
    ):
        self.variants = variants
        self.unigram = unigram_loss
        self.m: dict[str, dict[str, dict[str, Any]]] = metric_table(summary)
        self.runs = runs
        self.loss = per_seed(runs, "test_loss")
        self.ppl = per_seed(runs, "test_ppl")
        self.kn: dict[str, dict[str, Any]] | None = None  # metric -> summary row (SAFFU study)

    def has(self, *names: str) -> bool:
        return all(n in self.variants and n in self.m for n in names)

    def pm(self, variant: str, metric: str, digits: int = 1, scale: float = 1.0) -> str:
        """Mean ± 95 % t-interval half-width over seeds (the mean alone with one seed)."""
        r = self.m[variant].get(metric)
        if r is None:
            return MISSING
        half = None if r["ci95"] is None else r["ci95"] * scale
        return fmt_pm(r["mean"] * scale, half, digits)

    def mean(self, variant: str, metric: str) -> float:
        return self.m[variant][metric]["mean"]

    def solved_cell(self, v: str) -> str:
        """Solved parameters (M): the nonzero entries of the solved output maps; a solve whose
        map is exactly 0 (the residual target) says so."""
        solved = self.mean(v, "params_solved")
        maps = self.m[v].get("params_out_maps")
        if solved == 0 and maps and maps["mean"] and not VARIANTS[v].random_out:
            return "0 (target 0)"
        return fmt_num(solved / 1e6, 2)

    def main_rows(self) -> list[list[str] | str]:
        rows: list[list[str] | str] = []
        for v in self.variants:
            r = self.m[v]
            rows.append(
                [
                    LABELS[v],
                    fmt_num(self.mean(v, "params_trainable") / 1e6, 2),
                    self.solved_cell(v),
                    self.pm(v, "grad_time_s", 1),
                    self.pm(v, "solve_time_s", 2),
                    self.pm(v, "test_ppl", 1),
                    self.pm(v, "test_acc", 1, 100),
                    self.pm(v, "test_bpb", 3),
                    self.pm(v, "lambada_acc", 1, 100),
                    self.pm(v, "lambada_acc_seen", 1, 100),
                    f"{r['test_ppl']['n']}/{r['test_ppl']['n_expected']}",
                ]
            )
        if kn := self.kn_figures():
            rows += ["midrule", [kn["label"], *[MISSING] * 4, kn["ppl"], MISSING, kn["bpb"],
                                 MISSING, MISSING, MISSING]]  # fmt: skip
        return rows

    def share(self, variant: str) -> tuple[float, float | None]:
        """Loss-based share (L_uni - L_v) / (L_uni - L_full), per seed, then mean and 95 % CI."""
        full = self.loss["baseline"]
        vals = [
            loss_share(self.unigram, self.loss[variant][s], full[s])
            for s in sorted(set(full) & set(self.loss[variant]))
        ]
        return mean_ci(vals)

    def ratio(self, variant: str) -> tuple[float, float | None]:
        """The seed outline's measure: PPL_full / PPL_variant, per seed, then mean and 95 % CI."""
        full = self.ppl["baseline"]
        return mean_ci(
            [full[s] / self.ppl[variant][s] for s in sorted(set(full) & set(self.ppl[variant]))]
        )

    def contribution_rows(self) -> list[list[str]]:
        rows = [["Unigram (train counts)", fmt_num(math.exp(self.unigram), 1), MISSING, "0.0"]]
        rows += self.kneser_ney_rows()
        for v in CONTRIBUTION_VARIANTS:
            if self.has(v):
                r_mean, r_std = self.ratio(v)
                s_mean, s_std = self.share(v)
                rows.append(
                    [
                        LABELS[v],
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(100 * r_mean, percent(r_std), 1),
                        fmt_pm(100 * s_mean, percent(s_std), 1),
                    ]
                )
        return rows

    def kn_figures(self) -> dict[str, str]:
        """The SAFFU study's interpolated Kneser-Ney model on the full train split and the same
        test tokens (``summary/kneser_ney.parquet``), formatted, when this build has it (else
        {}): its label, test PPL, BPB and order, and against the baseline (deterministic, so the
        baseline's seed mean) the perplexity ratio and loss share in percent."""
        kn = self.kn
        if not kn or "test_ppl" not in kn or not self.has("baseline"):
            return {}
        ppl, loss = kn["test_ppl"], kn["test_loss"]["mean"]
        order = kn["order"]["mean"] if "order" in kn else None
        share = loss_share(self.unigram, loss, self.mean("baseline", "test_loss"))
        bpb = kn.get("test_bpb")
        return {
            "label": f"Kneser-Ney {fmt_num(order, 0)}-gram (train counts)",
            "order": fmt_num(order, 0),
            "ppl": fmt_pm(ppl["mean"], ppl.get("ci95"), 1),
            "bpb": MISSING if bpb is None else fmt_num(bpb["mean"], 3),
            "ratio": fmt_num(100 * self.mean("baseline", "test_ppl") / ppl["mean"], 1),
            "share": fmt_num(100 * share, 1),
        }

    def kneser_ney_rows(self) -> list[list[str]]:
        """The contribution table's n-gram row (``kn_figures``), when this build has it."""
        kn = self.kn_figures()
        return [[kn["label"], kn["ppl"], kn["ratio"], kn["share"]]] if kn else []

    def feature_rows(self) -> list[list[str]]:
        rows = []
        for v in FEATURE_VARIANTS:
            if self.has(v, "baseline"):
                diffs, p = paired(self.ppl[v], self.ppl["baseline"])
                d_mean, d_std = mean_ci(diffs)
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
                LABELS[v],
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
        """Test-loss change vs the reference (negative = better), its 95 % CI half-width and
        paired p-value."""
        diffs, p = paired(self.loss[variant], self.loss[reference])
        mean, std = mean_ci(diffs)
        return mean, std, p

    def target_rows(self) -> list[list[str]]:
        rows = []
        pairs = [(v, "attn_only") for v in TARGET_VARIANTS] + [(v, "baseline") for v in ("refit",)]
        for v, ref in pairs:
            if self.has(v, ref):
                d, s, p = self.target_comparison(v, ref)
                rows.append(
                    [
                        LABELS[v],
                        LABELS[ref],
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(d, s, 4),
                        fmt_p(p),
                    ]
                )
        return rows
