"""``ProbeReport``: the probe summaries' selections, per-group statistics and table rows.

Every cell is formatted here (the table definitions and the rendering are in
``pillm.probe.report``, the macros in ``pillm.probe.macros``); conventions as in
``pillm.probe.summary``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, fmt_sci, mean_std, tex_escape
from pillm.probe import correlations
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
    is_proxy,
    main_corpus,
    order_corpora,
    order_groups,
    per_block,
    unique,
)


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


class ProbeReport:
    """Selections, per-group statistics and table rows of the three probe summaries; ``params``
    is the probe_tables rule's (corpora, main corpus, bilinear rank, low-rank factor)."""

    def __init__(
        self,
        probe: pl.DataFrame,
        gradient: pl.DataFrame,
        jobs: pl.DataFrame,
        params: dict,
    ):
        self.probe, self.gradient, self.jobs, self.params = probe, gradient, jobs, params
        self.resamples = int(params.get("bootstrap_resamples", 1000))
        self._stats: dict[str, dict[str, Any]] = {}
        self.main = main_corpus(probe, params.get("main_corpus", "wikitext2"))
        self.corpora = order_corpora(probe["corpus"].to_list(), params.get("corpora", []))
        self.groups = order_groups(probe["model_group"].to_list())
        self.blocks = per_block(probe)
        self.labels: dict[str, str] = {}
        self.n_models: dict[str, int] = {}
        for g in self.groups:
            sub = probe.filter(pl.col("model_group") == g)
            self.labels[g] = str(sub["model_label"][0])
            self.n_models[g] = sub["model"].n_unique()

    # -- selections

    def raw(self, group: str, corpus: str | None) -> list[dict]:
        """Rows of one group (all seeds) on one corpus, by layer."""
        df = self.probe.filter(
            (pl.col("model_group") == group) & pl.col("corpus").eq_missing(corpus)
        )
        return df.sort("model", "layer").to_dicts()

    def block_rows(self, group: str, corpus: str | None) -> list[dict]:
        """Seed-mean rows of one group on one corpus, by layer."""
        if self.blocks.height == 0:
            return []
        df = self.blocks.filter(
            (pl.col("model_group") == group) & pl.col("corpus").eq_missing(corpus)
        )
        return df.sort("layer").to_dicts()

    def label(self, group: str, seeds: bool = False) -> str:
        """Escaped display name; with ``seeds``, the seed count of a multi-seed group appended."""
        text = tex_escape(self.labels[group])
        n = self.n_models[group]
        return f"{text} ({n} seeds)" if seeds and n > 1 else text

    def proxy(self, group: str) -> bool:
        rows = (
            self.raw(group, self.main)
            or self.probe.filter(pl.col("model_group") == group).to_dicts()
        )
        return bool(rows) and is_proxy(rows[0]["kind"], rows[0]["swap_metric"])

    def delta_digits(self, group: str) -> int:
        return 4 if self.proxy(group) else 2

    def mark(self, group: str, cell: str) -> str:
        """Append the proxy mark to a swap cell of an encoder group."""
        return cell + PROXY if cell != MISSING and self.proxy(group) else cell

    # -- per-group statistics

    def group_stats(self, group: str) -> dict[str, Any]:
        """Main-corpus statistics of one group (seed means per block, then over blocks); computed
        once per group (the bootstraps are the slow part)."""
        if group not in self._stats:
            self._stats[group] = self._group_stats(group)
        return self._stats[group]

    def _group_stats(self, group: str) -> dict[str, Any]:
        raw, blocks = self.raw(group, self.main), self.block_rows(group, self.main)
        first = blocks[0] if blocks else {}
        per_model = [
            mean_std(r["r2_lin"] for r in raw if r["model"] == m)[0]
            for m in unique(r["model"] for r in raw)
        ]
        lo = argext(blocks, "r2_lin", largest=False)
        hi = argext(blocks, "r2_lin", largest=True)
        best = argext(blocks, "delta_linear", largest=False)
        worst = argext(blocks, "delta_linear", largest=True)
        lr_best = argext(blocks, "delta_lowrank", largest=False)

        def ratio(num: str, den: str) -> float | None:
            r = [b[num] / b[den] for b in blocks if finite(b.get(num)) and b.get(den)]
            return mean_std(r)[0]

        spread = self.corpus_spread(group)
        grad = [r for r in raw if finite(r["grad_r2"]) and finite(r["grad_closed_r2"])]
        df = correlations.blocks_of(self.probe, group, self.main)
        excl = argext(blocks, "excluded_share", largest=True)
        drop = argext(
            [{**b, "drop": b["r2_lin_all"] - b["r2_lin"]} for b in blocks
             if finite(b["r2_lin_all"]) and finite(b["r2_lin"])],
            "drop", largest=True,
        )  # fmt: skip
        outl = argext(blocks, "outlier_share", largest=True)
        return {
            "blocks": first.get("n_layers"),
            "d": first.get("d_in"),
            "rlin": mean_std(b["r2_lin"] for b in blocks)[0],
            "rlin_std": mean_std(per_model)[1],
            "rlin_min": lo["r2_lin"] if lo else None,
            "rlin_min_layer": lo["layer"] if lo else None,
            "rlin_max": hi["r2_lin"] if hi else None,
            "rlin_max_layer": hi["layer"] if hi else None,
            "feature_median": mean_std(b["r2_feature_median"] for b in blocks)[0],
            "gain": mean_std(b["bilinear_gain"] for b in blocks)[0],
            "pearson": correlations.bilinear_r(df, self.resamples),
            "rank_rho": correlations.rank_r(df, self.resamples),
            "rlin_all": mean_std(b["r2_lin_all"] for b in blocks)[0],
            "excl_max": excl["excluded_share"] if excl else None,
            "excl_max_layer": excl["layer"] if excl else None,
            "excl_mean": mean_std(b["excluded_share"] for b in blocks)[0],
            "drop_max": drop["drop"] if drop else None,
            "drop_max_layer": drop["layer"] if drop else None,
            "drop_max_rlin": drop["r2_lin"] if drop else None,
            "drop_max_rlin_all": drop["r2_lin_all"] if drop else None,
            "outlier_mean": mean_std(b["outlier_share"] for b in blocks)[0],
            "outlier_max": outl["outlier_share"] if outl else None,
            "outlier_max_layer": outl["layer"] if outl else None,
            "outlier_max_rest": outl["r2_no_outliers"] if outl else None,
            "outlier_max_rlin": outl["r2_lin"] if outl else None,
            "no_outliers": mean_std(b["r2_no_outliers"] for b in blocks)[0],
            "lin_best": best["delta_linear"] if best else None,
            "lin_best_layer": best["layer"] if best else None,
            "lin_worst": worst["delta_linear"] if worst else None,
            "lin_worst_layer": worst["layer"] if worst else None,
            "lr_best": lr_best["delta_lowrank"] if lr_best else None,
            "lr_best_layer": lr_best["layer"] if lr_best else None,
            "base": mean_std(b["base_value"] for b in blocks)[0],
            "ffn_lin": ratio("ffn_params", "linear_params"),
            "ffn_lr": ratio("ffn_params", "lowrank_params"),
            "lin_lr": ratio("linear_params", "lowrank_params"),
            "rank": unique(b["lowrank_rank"] for b in blocks),
            "swap_spearman": correlations.swap_rho(df, self.resamples),
            "swap_spearman_all": correlations.swap_rho(df, self.resamples, all_rows=True),
            "swap_diff": correlations.swap_rho_diff(df, self.resamples),
            "spread": spread[0] if spread else None,
            "spread_layer": spread[1] if spread else None,
            "grad_gap": mean_std(r["grad_closed_r2"] - r["grad_r2"] for r in grad)[0],
        }

    def corpus_spread(self, group: str) -> tuple[float, int] | None:
        """Largest per-block range of the seed-mean R²_lin over corpora, and its block."""
        if self.blocks.height == 0:
            return None
        df = self.blocks.filter(pl.col("model_group") == group)
        by_layer = (
            df.group_by("layer")
            .agg(
                (pl.col("r2_lin").max() - pl.col("r2_lin").min()).alias("spread"),
                pl.col("r2_lin").count().alias("n"),
            )
            .filter(pl.col("n") >= 2)
            .sort("layer")
        )
        row = argext(by_layer.to_dicts(), "spread", largest=True)
        return (row["spread"], row["layer"]) if row else None

    # -- table rows

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
                    fmt_r(s["pearson"].value),
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
                    " (blocks from 0); columns as in Table~\\ref{tab:probe-summary}. Eff.\\ rank: "
                    "exponential of the entropy of the normalised singular values of the fitted "
                    "linear map; $\\kappa$: condition number of the Gram matrix of the fitting "
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
            for b in self.block_rows(g, self.main):
                rows.append(
                    [
                        str(b["layer"]),
                        _r2_cell(b, "r2_lin", multi),
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
                caption += (
                    " (blocks from 0). $\\Rlin$: on the rows the row policy keeps, and on all "
                    "rows, each with its 95\\,\\% percentile-bootstrap interval over held-out "
                    "windows (several seeds: mean $\\pm$ sd over seeds instead). Excl.: share of "
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

    # -- labels for the macros

    def where(self, group: str, layer: int | None) -> str:
        return MISSING if layer is None else f"{self.label(group)}, block {layer}"
