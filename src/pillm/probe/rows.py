"""``ProbeReport``: the probe summaries' table rows, on ``ProbeGroups``' selections and stats.

Every cell is formatted here (the table definitions and the rendering are in
``pillm.probe.report``, the macros in ``pillm.probe.macros``); conventions as in
``pillm.probe.summary``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, fmt_sci, mean_std, tex_escape
from pillm.probe.groups import ProbeGroups
from pillm.probe.intervals import Estimate
from pillm.probe.summary import (
    PROXY,
    argext,
    corpus_name,
    device_name,
    fmt_at,
    fmt_lr,
    fmt_r,
    group_key,
    order_corpora,
    order_groups,
    row_policy_words,
    unique,
)

FEW = "$^{\\ddagger}$"  # a correlation with too few blocks for a direction


def fmt_ci(lo: float | None, hi: float | None, digits: int) -> str:
    """'[lo, hi]', or '--' without an interval."""
    if not (finite(lo) and finite(hi)):
        return MISSING
    return f"[{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def fmt_est(est: Estimate, digits: int = 2) -> str:
    """'value [lo, hi]' of a bootstrap estimate; the value alone without an interval."""
    if est.value is None:
        return MISSING
    ci = fmt_ci(est.lo, est.hi, digits)
    return fmt_num(est.value, digits) + ("" if ci == MISSING else f" {ci}")


def _r2_cell(block: dict, col: str, multi: bool) -> str:
    """A block's R²: mean ± sd over seeds, or the value with its interval over windows."""
    if multi:
        return fmt_pm(block[col], block[f"{col}_std"], 3)
    ci = fmt_ci(block[f"{col}_lo"], block[f"{col}_hi"], 3)
    return fmt_num(block[col], 3) + ("" if ci == MISSING else f" {ci}")


class ProbeReport(ProbeGroups):
    """Table rows of the three probe summaries, one method per table (``ProbeGroups``: the
    selections and per-group statistics they read)."""

    def summary_rows(self) -> list[list[str]]:
        rows = []
        for g in self.groups:
            s = self.group_stats(g)
            dd = self.delta_digits(g)
            if s["rank"]:
                rank = "/".join(str(k) for k in s["rank"])
                lr_ratio = f"{fmt_num(s['ffn_lr'], 1)}$\\times$ ($k{{=}}{rank}$)"
            else:
                lr_ratio = MISSING
            rows.append(
                [
                    self.label(g, seeds=True),
                    fmt_num(s["blocks"], 0),
                    fmt_num(s["d"], 0),
                    f"{fmt_pm(s['rlin'], s['rlin_std'], 3)} "
                    f"[{fmt_num(s['rlin_min'], 3)}, {fmt_num(s['rlin_max'], 3)}]",
                    fmt_num(s["rlin_all"], 3),
                    fmt_num(s["feature_median"], 3),
                    fmt_num(s["gain"], 3),
                    fmt_r(s["pearson"].value) + (FEW if self.too_few(s["pearson"]) else ""),
                    self.mark(g, fmt_at(s["lin_best"], s["lin_best_layer"], dd)),
                    self.mark(g, fmt_at(s["lin_worst"], s["lin_worst_layer"], dd)),
                    self.mark(g, fmt_at(s["lr_best"], s["lr_best_layer"], dd)),
                    f"{fmt_num(s['ffn_lin'], 1)}$\\times$" if finite(s["ffn_lin"]) else MISSING,
                    lr_ratio,
                ]
            )
        return rows

    def corpora_rows(self) -> list[list[str] | str]:
        rows: list[list[str] | str] = []
        for g in self.groups:
            if rows:
                rows.append("midrule")
            spread = self.corpus_spread(g)
            present = [c for c in self.corpora if self.block_rows(g, c)]
            dd = self.delta_digits(g)
            for i, c in enumerate(present):
                raw, blocks = self.raw(g, c), self.block_rows(g, c)
                per_model = [
                    mean_std(r["r2_lin"] for r in raw if r["model"] == m)[0]
                    for m in unique(r["model"] for r in raw)
                ]
                lo = argext(blocks, "r2_lin", largest=False)
                rows.append(
                    [
                        self.label(g) if i == 0 else "",
                        corpus_name(c),
                        fmt_num(mean_std(b["n_heldout_rows"] for b in blocks)[0], 0),
                        fmt_pm(mean_std(b["r2_lin"] for b in blocks)[0], mean_std(per_model)[1], 3),
                        fmt_at(lo["r2_lin"], lo["layer"], 3) if lo else MISSING,
                        fmt_num(mean_std(b["bilinear_gain"] for b in blocks)[0], 3),
                        self.mark(g, fmt_num(mean_std(b["base_value"] for b in blocks)[0], dd)),
                        self.mark(g, fmt_num(mean_std(b["delta_linear"] for b in blocks)[0], dd)),
                        (fmt_at(spread[0], spread[1], 3) if spread else MISSING) if i == 0 else "",
                    ]
                )
        return rows

    def gradient_rows(self) -> list[list[str] | str]:
        df = self.probe.filter(pl.col("grad_r2").is_not_null())
        rows: list[list[str] | str] = []
        for g in self.groups:
            sub = df.filter(pl.col("model_group") == g)
            if sub.height == 0:
                continue
            if rows:
                rows.append("midrule")
            first = True
            for c in order_corpora(sub["corpus"].to_list(), self.corpora):
                for layer in sorted(set(sub.filter(pl.col("corpus") == c)["layer"].to_list())):
                    recs = sub.filter((pl.col("corpus") == c) & (pl.col("layer") == layer))
                    recs = recs.to_dicts()
                    closed = [r["grad_closed_r2"] for r in recs]
                    grad = [r["grad_r2"] for r in recs]
                    gap = [a - b for a, b in zip(closed, grad, strict=True) if finite(a)]
                    rows.append(
                        [
                            self.label(g) if first else "",
                            corpus_name(c),
                            str(layer),
                            fmt_pm(mean_std(closed)[0], mean_std(closed)[1], 3),
                            fmt_pm(mean_std(grad)[0], mean_std(grad)[1], 3),
                            fmt_pm(mean_std(gap)[0], mean_std(gap)[1], 3),
                            "/".join(fmt_num(v, 0) for v in unique(r["grad_steps"] for r in recs))
                            or MISSING,
                            "/".join(fmt_num(v, 0) for v in unique(r["grad_rows"] for r in recs))
                            or MISSING,
                            "/".join(fmt_lr(v) for v in unique(r["grad_lr"] for r in recs))
                            or MISSING,
                        ]
                    )
                    first = False
        return rows

    def block_tables(self) -> list[dict[str, Any]]:
        """One appendix table per group: per-block rows on the main corpus."""
        out = []
        for g in self.groups:
            blocks = self.block_rows(g, self.main)
            dd = self.delta_digits(g)
            rows = []
            for b in blocks:
                rows.append(
                    [
                        str(b["layer"]),
                        fmt_pm(b["r2_lin"], b["r2_lin_std"], 3),
                        fmt_pm(b["r2_feature_median"], b["r2_feature_median_std"], 3),
                        fmt_pm(b["effective_rank"], b["effective_rank_std"], 1),
                        fmt_pm(b["map_rank"], b["map_rank_std"], 1),
                        fmt_pm(b["bilinear_gain"], b["bilinear_gain_std"], 3),
                        fmt_sci(b["kappa"], 1),
                        tex_escape(b["solver"] or MISSING),
                        self.mark(g, fmt_pm(b["delta_linear"], b["delta_linear_std"], dd)),
                        self.mark(g, fmt_pm(b["delta_lowrank"], b["delta_lowrank_std"], dd)),
                        fmt_num(b["lowrank_rank"], 0),
                    ]
                )
            main = corpus_name(self.main) if self.main else MISSING
            caption = f"Per-block probe results of {self.label(g, seeds=True)} on {main}"
            if not out:  # the first table explains the columns for all of them
                caption += (
                    " (blocks from 0); columns as in Table~\\ref{tab:probe-summary}. Input "
                    "cond.: input conditioning, the effective rank (exponential of the entropy of "
                    "the normalised singular values) of the fitted linear map $W$ itself, which a "
                    "few input directions of tiny variance and huge weight dominate when the "
                    "input is ill-conditioned; map rank: the effective rank of the map after "
                    "whitening its input, $\\Sigma^{1/2}W$ ($\\Sigma$: input covariance of "
                    "the fitting rows), whose singular values are those of the fitted outputs' "
                    "covariance; $\\kappa$: condition number of the Gram matrix of the fitting "
                    "rows of $[X,1]$ (largest over seeds); solver: Cholesky, or the minimum-norm "
                    "eigendecomposition solve when $\\kappa$ exceeds $10^{10}$ or Cholesky "
                    "fails; $k$: rank of the low-rank replacement."
                )
            else:
                caption += "; columns as in Table~\\ref{tab:probe-blocks}."
            if self.proxy(g):
                caption += f" {PROXY}: swap metric is the encoder proxy $1-\\cos$."
            elif self.n_models[g] > 1:
                caption += " $\\pm$: sample std over seeds."
            label = "tab:probe-blocks" if not out else f"tab:probe-blocks-{group_key(g)}"
            out.append({"caption": caption, "label": label, "rows": rows})
        return out

    def mask_tables(self) -> list[dict[str, Any]]:
        """One table per group: per block on the main corpus, R²_lin on the kept rows and on all
        rows (with the bootstrap interval over windows; for several seeds mean ± sd over seeds),
        the excluded rows' and the top-k coordinates' share of the held-out variance, and R²_lin
        without those coordinates."""
        out = []
        for g in self.groups:
            multi = self.n_models[g] > 1
            rows = []
            moved = {b["layer"] for b in self.massive_rows(g)}
            for b in self.block_rows(g, self.main):
                rows.append(
                    [
                        str(b["layer"]),
                        _r2_cell(b, "r2_lin", multi),
                        fmt_num(b["r2_lin_with_massive"], 3) if b["layer"] in moved else "",
                        _r2_cell(b, "r2_lin_all", multi),
                        fmt_num(b["excluded_share"], 3),
                        fmt_num(b["outlier_share"], 3),
                        fmt_num(b["r2_no_outliers"], 3),
                        fmt_num(b["outlier_share_all"], 3),
                        fmt_num(b["r2_no_outliers_all"], 3),
                        fmt_num(b["r2_feature_median"], 3),
                    ]
                )
            main = corpus_name(self.main) if self.main else MISSING
            caption = (
                f"Rows and outlier coordinates per block of {self.label(g, seeds=True)} on {main}"
            )
            if not out:
                change = fmt_num((self.params.get("rows") or {}).get("massive_change"), 2)
                policy = row_policy_words(self.params.get("rows"))
                refits = self.params.get("refit_resamples", MISSING)
                caption += (
                    f" (blocks from 0). The row policy leaves out {policy}. "
                    "$\\Rlin$: on the rows the row policy keeps, and on all rows, each with its "
                    "95\\,\\% bootstrap interval over the fitting and the held-out windows "
                    f"({refits} resamples), the map refitted on each resample and the percentiles "
                    "centred on the sample's "
                    "value (several seeds: mean $\\pm$ sd over seeds instead). W/o massive: "
                    "$\\Rlin$ fitted and scored on the rows the policy keeps without its "
                    "massive-activation rule (the rule's rows kept), shown where it differs from "
                    f"the block's $\\Rlin$ by more than {change}. Excl.: share of "
                    "the all-rows held-out output variance carried by the rows the policy leaves "
                    "out. Top-$k$: share of the held-out variance in the $k$ output coordinates of "
                    "largest variance on the fitting rows, and $\\Rlin$ of the same fit over the "
                    "other coordinates, on the kept rows and on all rows. Feat.\\ med.: median "
                    "per-coordinate $R^2$ on the kept rows."
                )
            else:
                caption += "; columns as in Table~\\ref{tab:probe-masks}."
            label = "tab:probe-masks" if not out else f"tab:probe-masks-{group_key(g)}"
            out.append({"caption": caption, "label": label, "rows": rows})
        return out

    def cost_rows(self) -> list[list[str]]:
        jobs = self.jobs
        if jobs.height == 0:
            return []
        rank = {g: i for i, g in enumerate(order_groups(jobs["model_group"].to_list()))}
        crank = {c: i for i, c in enumerate(order_corpora(jobs["corpus"].to_list(), self.corpora))}
        recs = sorted(
            jobs.to_dicts(), key=lambda r: (rank[r["model_group"]], r["model"], crank[r["corpus"]])
        )
        rows = []
        for r in recs:
            name = tex_escape(r["model_label"])
            if r["model"] != r["model_group"]:
                name += f" ({tex_escape(r['model'])})"
            rows.append(
                [
                    name,
                    corpus_name(r["corpus"]),
                    tex_escape(device_name(r)),
                    fmt_num(r["n_rows"], 0),
                    fmt_num(r["rows_per_s"], 0),
                    fmt_num(r["load_seconds"], 1),
                    fmt_num(r["capture_fit_seconds"], 1),
                    fmt_num(r["swap_seconds"], 1),
                    fmt_num(r["peak_mem_mb"], 0),
                ]
            )
        return rows
