"""``ProbeGroups``: the probe summaries' selections and per-group statistics.

Selections pick one model group's rows on one corpus; ``group_stats`` reduces a group's
main-corpus blocks to the numbers the tables and macros quote (seed means per block, then over
blocks; bootstrap intervals from ``pillm.probe.correlations``). Conventions as in
``pillm.probe.summary``; the table rows built on these are in ``pillm.probe.rows``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pillm.paper.latex import MISSING, finite, mean_std, tex_escape
from pillm.probe import correlations
from pillm.probe.summary import (
    PROXY,
    argext,
    is_proxy,
    main_corpus,
    order_corpora,
    order_groups,
    per_block,
    unique,
)


class ProbeGroups:
    """Selections and per-group statistics of the three probe summaries; ``params`` is the
    probe_tables rule's (corpora, main corpus, bilinear rank, low-rank factor)."""

    def __init__(
        self,
        probe: pl.DataFrame,
        gradient: pl.DataFrame,
        jobs: pl.DataFrame,
        params: dict,
    ):
        self.probe, self.gradient, self.jobs, self.params = probe, gradient, jobs, params
        self.resamples = int(params.get("bootstrap_resamples", 1000))
        self.min_blocks = int(params.get("min_blocks", correlations.MIN_BLOCKS))
        self.massive_change = float((params.get("rows") or {}).get("massive_change", 0.01))
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

    def partial_corpora(self) -> dict[str, list[str]]:
        """group -> the corpora it has, for the groups probed on fewer than every corpus of the
        build (probe.cross_corpus_models)."""
        present = {g: [c for c in self.corpora if self.block_rows(g, c)] for g in self.groups}
        return {g: cs for g, cs in present.items() if len(cs) < len(self.corpora)}

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
        swaps = df.filter(pl.col("delta_linear").is_not_null())
        kept, every = (correlations.swap_rho(swaps, self.resamples, a) for a in (False, True))
        diff = correlations.swap_rho_diff(swaps, self.resamples)
        return {
            "swap_spearman": kept,
            "swap_spearman_all": every,
            "swap_diff": diff,
            "swap_guard": correlations.guard(diff, kept, every, self.min_blocks)
            if diff.value is not None
            else None,
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
            "input_rho": correlations.rank_r(df, self.resamples, "effective_rank"),
            "map_rho": correlations.rank_r(df, self.resamples, "map_rank"),
            "map_rank": mean_std(b["map_rank"] for b in blocks)[0],
            "massive_blocks": len(self.massive_rows(group)),
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
            "spread": spread[0] if spread else None,
            "spread_layer": spread[1] if spread else None,
            "grad_gap": mean_std(r["grad_closed_r2"] - r["grad_r2"] for r in grad)[0],
        }

    def massive_rows(self, group: str) -> list[dict]:
        """Seed-mean blocks of ``group`` on the main corpus whose R²_lin without the row
        policy's massive-activation rule differs from their R²_lin by more than
        ``probe.rows.massive_change``."""
        return [
            b for b in self.block_rows(group, self.main)
            if finite(b["r2_lin_with_massive"]) and finite(b["r2_lin"])
            and abs(b["r2_lin_with_massive"] - b["r2_lin"]) > self.massive_change
        ]  # fmt: skip

    def too_few(self, est: correlations.Estimate) -> bool:
        """The estimate has too few blocks for a direction (``correlations.too_few``)."""
        return correlations.too_few(est, self.min_blocks)

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

    # -- labels for the macros

    def where(self, group: str, layer: int | None) -> str:
        return MISSING if layer is None else f"{self.label(group)}, block {layer}"
