"""Tables and macros of the R²_lin probing study (how linear is each trained FFN block?).

Inputs are the summaries written by the pipeline's probe aggregation: ``probe.parquet`` (one row
per model, corpus and block), ``probe_gradient.parquet`` (the gradient-trained linear map along
its steps) and ``probe_jobs.parquet`` (cost per probing job). Every cell and macro is formatted
here; the templates only lay them out.

Conventions. A model group is one architecture and checkpoint family: the ``pillm`` group holds
one model per seed, every pretrained group one model. Per block, a group's value is the mean over
its models (seeds); where a spread matters it is the sample std over seeds (undefined, and left
out, for one model). Blocks are numbered from 0. Whatever groups a build holds, every macro of
every known group is defined (as '--' when the group is absent), so the manuscript compiles for
any configuration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from scipy import stats

from pillm.paper.latex import (
    MISSING,
    finite,
    fmt_num,
    fmt_pm,
    fmt_range,
    fmt_sci,
    macro_name,
    mean_std,
    tex_escape,
)
from pillm.paper.report import LongTable, Table, render_report
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet

PROXY = "$^{\\dagger}$"
CORPUS_NAMES = {
    "wikitext2": "WikiText-2",
    "ptb": "Penn Treebank",
    "tinyshakespeare": "Tiny Shakespeare",
}
# Model groups in display order; unknown groups follow, sorted. Keys are normalised ids (letters
# and digits only) so "pythia-160m" and "pythia160m" are one group; values are macro infixes.
KNOWN_GROUPS = {
    "pillm": "Pillm",
    "minilm": "MiniLM",
    "smollm2": "SmolLM",
    "gpt2": "GPTTwo",
    "pythia160m": "Pythia",
    "llama160m": "Llama",
}
_QUANT = re.compile(r"\bQ\d+_[0-9A-Z_]+\b")
MEAN_COLS = [
    "r2_lin",
    "r2_feature_median",
    "effective_rank",
    "r2_bilinear",
    "bilinear_gain",
    "base_value",
    "swap_linear",
    "swap_lowrank",
    "delta_linear",
    "delta_lowrank",
    "grad_r2",
    "grad_closed_r2",
    "n_train_rows",
    "n_heldout_rows",
]
FIRST_COLS = [
    "model_label",
    "family",
    "kind",
    "n_layers",
    "depth",
    "d_in",
    "d_out",
    "ffn_params",
    "linear_params",
    "lowrank_params",
    "lowrank_rank",
    "swap_metric",
]

PROBE_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "model_group": pl.String,
    "model_label": pl.String,
    "family": pl.String,
    "kind": pl.String,
    "seed": pl.Int64,
    "corpus": pl.String,
    "layer": pl.Int64,
    "n_layers": pl.Int64,
    "depth": pl.Float64,
    "r2_lin": pl.Float64,
    "r2_feature_median": pl.Float64,
    "effective_rank": pl.Float64,
    "r2_bilinear": pl.Float64,
    "bilinear_gain": pl.Float64,
    "bilinear_rank": pl.Int64,
    "n_train_rows": pl.Int64,
    "n_heldout_rows": pl.Int64,
    "d_in": pl.Int64,
    "d_out": pl.Int64,
    "solver": pl.String,
    "kappa": pl.Float64,
    "ffn_params": pl.Int64,
    "linear_params": pl.Int64,
    "lowrank_params": pl.Int64,
    "lowrank_rank": pl.Int64,
    "swap_metric": pl.String,
    "base_value": pl.Float64,
    "swap_linear": pl.Float64,
    "swap_lowrank": pl.Float64,
    "delta_linear": pl.Float64,
    "delta_lowrank": pl.Float64,
    "grad_r2": pl.Float64,
    "grad_closed_r2": pl.Float64,
    "grad_steps": pl.Int64,
    "grad_rows": pl.Int64,
    "grad_lr": pl.Float64,
}
GRADIENT_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "model_group": pl.String,
    "model_label": pl.String,
    "corpus": pl.String,
    "layer": pl.Int64,
    "depth": pl.Float64,
    "step": pl.Int64,
    "r2_heldout": pl.Float64,
    "closed_r2": pl.Float64,
}
JOBS_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "model_group": pl.String,
    "model_label": pl.String,
    "corpus": pl.String,
    "device": pl.String,
    "load_seconds": pl.Float64,
    "capture_fit_seconds": pl.Float64,
    "rows_per_s": pl.Float64,
    "swap_seconds": pl.Float64,
    "peak_mem_mb": pl.Float64,
    "n_rows": pl.Int64,
}


# ---------------------------------------------------------------- loading and small helpers


def conform(df: pl.DataFrame, schema: dict[str, Any]) -> pl.DataFrame:
    """``df`` with every column of ``schema``: missing ones added as nulls, all-null (``Null``
    dtype) ones cast; other columns are kept as they are."""
    fixes = [
        pl.lit(None, dtype=dtype).alias(name)
        if name not in df.columns
        else pl.col(name).cast(dtype)
        for name, dtype in schema.items()
        if name not in df.columns or df.schema[name] == pl.Null
    ]
    return df.with_columns(fixes) if fixes else df


def read_frame(path: str | Path, schema: dict[str, Any]) -> pl.DataFrame:
    """The parquet at ``path`` conformed to ``schema`` (empty when the file does not exist)."""
    path = Path(path)
    if not path.is_file():
        return pl.DataFrame(schema=schema)
    return conform(pl.read_parquet(path), schema)


def load_summaries(summary_dir: str | Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(probe, gradient, jobs) frames from ``summary_dir``."""
    d = Path(summary_dir)
    return (
        read_frame(d / "probe.parquet", PROBE_SCHEMA),
        read_frame(d / "probe_gradient.parquet", GRADIENT_SCHEMA),
        read_frame(d / "probe_jobs.parquet", JOBS_SCHEMA),
    )


def _key(group: str) -> str:
    return re.sub(r"[^a-z0-9]", "", group.lower())


def group_macro(group: str) -> str:
    """Macro infix of a model group, letters only.

    'gpt2' -> 'GPTTwo', 'pythia-160m' -> 'Pythia', unknown 'opt-125m' -> 'OptOneTwoFiveM'.
    """
    if _key(group) in KNOWN_GROUPS:
        return KNOWN_GROUPS[_key(group)]
    return macro_name(group)


def order_groups(groups: Iterable[str]) -> list[str]:
    rank = {k: i for i, k in enumerate(KNOWN_GROUPS)}
    return sorted(set(groups), key=lambda g: (rank.get(_key(g), len(rank)), g))


def order_corpora(corpora: Iterable[str], preferred: Sequence[str] = ()) -> list[str]:
    pref = list(preferred) + [c for c in CORPUS_NAMES if c not in preferred]
    rank = {c: i for i, c in enumerate(pref)}
    return sorted(set(corpora), key=lambda c: (rank.get(c, len(rank)), c))


def corpus_name(corpus: str) -> str:
    return tex_escape(CORPUS_NAMES.get(corpus, corpus))


def main_corpus(df: pl.DataFrame, preferred: str | None = "wikitext2") -> str | None:
    """``preferred`` if the data has it, else the corpus with most rows (None for no data)."""
    corpora = df["corpus"].to_list() if "corpus" in df.columns else []
    if preferred in corpora:
        return preferred
    if not corpora:
        return None
    return max(order_corpora(corpora), key=corpora.count)


def is_proxy(kind: str | None, swap_metric: str | None = None) -> bool:
    """True where the swap metric is the encoder proxy (1 - cosine), not a perplexity."""
    return kind == "encoder" or swap_metric == "emb_cos_dist"


def pearson(x: Sequence[float | None], y: Sequence[float | None]) -> float | None:
    """Pearson r over the pairs where both values are finite; None for < 3 pairs or no spread."""
    pairs = [(float(a), float(b)) for a, b in zip(x, y, strict=True) if finite(a) and finite(b)]
    if len(pairs) < 3:
        return None
    mx = sum(a for a, _ in pairs) / len(pairs)
    my = sum(b for _, b in pairs) / len(pairs)
    sxx = sum((a - mx) ** 2 for a, _ in pairs)
    syy = sum((b - my) ** 2 for _, b in pairs)
    sxy = sum((a - mx) * (b - my) for a, b in pairs)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> float | None:
    """Spearman rank correlation (Pearson r of average ranks) over the finite pairs."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if finite(a) and finite(b)]
    if len(pairs) < 3:
        return None
    rx = stats.rankdata([a for a, _ in pairs])
    ry = stats.rankdata([b for _, b in pairs])
    return pearson(list(rx), list(ry))


def n_pairs(x: Sequence[float | None], y: Sequence[float | None]) -> int:
    return sum(1 for a, b in zip(x, y, strict=True) if finite(a) and finite(b))


def fmt_at(value: float | None, layer: int | None, digits: int) -> str:
    """'value (block)' for a best/worst block; '--' when there is none."""
    if not finite(value) or layer is None:
        return MISSING
    return f"{fmt_num(value, digits)} ({layer})"


def fmt_r(r: float | None) -> str:
    return fmt_num(r, 2)


def fmt_lr(lr: float | None) -> str:
    if not finite(lr):
        return MISSING
    return fmt_sci(lr, 1) if lr < 1e-3 else f"{lr:g}"


def ordinal(n: int) -> str:
    """5 -> '5th', 2 -> '2nd', 11 -> '11th'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def join_words(items: Sequence[str], empty: str = "none") -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _argext(rows: list[dict], col: str, largest: bool) -> dict | None:
    """The row with the smallest (or largest) finite ``col``; None when no row has one."""
    cand = [r for r in rows if finite(r.get(col))]
    if not cand:
        return None
    return (max if largest else min)(cand, key=lambda r: r[col])


def _unique(values: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return out


def _device(job: dict) -> str | None:
    """The device's name (e.g. the GPU model) where the job recorded one, else its id."""
    return job.get("device_name") or job.get("device")


def per_block(df: pl.DataFrame) -> pl.DataFrame:
    """One row per (model_group, corpus, layer): seed means of the metrics, ``*_std`` over seeds
    (null for one model), ``n_models``, the largest κ and the solvers used."""
    if df.height == 0:
        return df
    aggs: list[pl.Expr] = [pl.len().alias("n_models")]
    for c in MEAN_COLS:
        aggs.append(pl.col(c).cast(pl.Float64).mean().alias(c))
        aggs.append(pl.col(c).cast(pl.Float64).std().alias(f"{c}_std"))
    aggs += [pl.col(c).first() for c in FIRST_COLS]
    aggs += [
        pl.col("kappa").max(),
        pl.col("bilinear_rank").min().alias("bilinear_rank_min"),
        pl.col("bilinear_rank").max().alias("bilinear_rank_max"),
        pl.col("solver").unique().sort().str.join("/").alias("solver"),
    ]
    return df.group_by(["model_group", "corpus", "layer"]).agg(aggs).sort("corpus", "layer")


# ---------------------------------------------------------------- the report


class ProbeReport:
    """Rows of every probe table and the probe macros, from the three summaries."""

    def __init__(
        self,
        probe: pl.DataFrame,
        gradient: pl.DataFrame,
        jobs: pl.DataFrame,
        params: dict,
    ):
        self.probe, self.gradient, self.jobs, self.params = probe, gradient, jobs, params
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
        """Main-corpus statistics of one group (seed means per block, then over blocks)."""
        raw, blocks = self.raw(group, self.main), self.block_rows(group, self.main)
        first = blocks[0] if blocks else {}
        per_model = [
            mean_std(r["r2_lin"] for r in raw if r["model"] == m)[0]
            for m in _unique(r["model"] for r in raw)
        ]
        lo = _argext(blocks, "r2_lin", largest=False)
        hi = _argext(blocks, "r2_lin", largest=True)
        best = _argext(blocks, "delta_linear", largest=False)
        worst = _argext(blocks, "delta_linear", largest=True)
        lr_best = _argext(blocks, "delta_lowrank", largest=False)

        def ratio(num: str, den: str) -> float | None:
            r = [b[num] / b[den] for b in blocks if finite(b.get(num)) and b.get(den)]
            return mean_std(r)[0]

        spread = self.corpus_spread(group)
        grad = [r for r in raw if finite(r["grad_r2"]) and finite(r["grad_closed_r2"])]
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
            "pearson": pearson(
                [None if r["r2_lin"] is None else 1 - r["r2_lin"] for r in raw],
                [r["bilinear_gain"] for r in raw],
            ),
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
            "rank": _unique(b["lowrank_rank"] for b in blocks),
            "swap_spearman": spearman([r["r2_lin"] for r in raw], [r["delta_linear"] for r in raw]),
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
        row = _argext(by_layer.to_dicts(), "spread", largest=True)
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
                    fmt_num(s["feature_median"], 3),
                    fmt_num(s["gain"], 3),
                    fmt_r(s["pearson"]),
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
                    for m in _unique(r["model"] for r in raw)
                ]
                lo = _argext(blocks, "r2_lin", largest=False)
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
                            "/".join(fmt_num(v, 0) for v in _unique(r["grad_steps"] for r in recs))
                            or MISSING,
                            "/".join(fmt_num(v, 0) for v in _unique(r["grad_rows"] for r in recs))
                            or MISSING,
                            "/".join(fmt_lr(v) for v in _unique(r["grad_lr"] for r in recs))
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
            label = "tab:probe-blocks" if not out else f"tab:probe-blocks-{_key(g)}"
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
                    tex_escape(_device(r)),
                    fmt_num(r["n_rows"], 0),
                    fmt_num(r["rows_per_s"], 0),
                    fmt_num(r["load_seconds"], 1),
                    fmt_num(r["capture_fit_seconds"], 1),
                    fmt_num(r["swap_seconds"], 1),
                    fmt_num(r["peak_mem_mb"], 0),
                ]
            )
        return rows

    # -- macros

    def where(self, group: str, layer: int | None) -> str:
        return MISSING if layer is None else f"{self.label(group)}, block {layer}"

    def group_macros(self) -> dict[str, str]:
        """Per-group macros for every known group and every group in the data."""
        out: dict[str, str] = {}
        names = {KNOWN_GROUPS[k]: None for k in KNOWN_GROUPS}
        names.update({group_macro(g): g for g in self.groups})
        for name, g in names.items():
            p = f"Probe{name}"
            if g is None:
                for suffix in GROUP_MACRO_SUFFIXES:
                    out[p + suffix] = MISSING
                continue
            s, dd = self.group_stats(g), self.delta_digits(g)
            out.update(
                {
                    p + "Label": self.label(g),
                    p + "Blocks": fmt_num(s["blocks"], 0),
                    p + "Rlin": fmt_pm(s["rlin"], s["rlin_std"], 3),
                    p + "RlinMin": fmt_num(s["rlin_min"], 3),
                    p + "RlinMax": fmt_num(s["rlin_max"], 3),
                    p + "FeatureMedian": fmt_num(s["feature_median"], 3),
                    p + "BilinearGain": fmt_num(s["gain"], 3),
                    p + "Pearson": fmt_r(s["pearson"]),
                    p + "LinSwapBest": fmt_num(s["lin_best"], dd),
                    p + "LinSwapBestBlock": fmt_num(s["lin_best_layer"], 0),
                    p + "LinSwapWorst": fmt_num(s["lin_worst"], dd),
                    p + "LinSwapWorstBlock": fmt_num(s["lin_worst_layer"], 0),
                    p + "LowRankSwapBest": fmt_num(s["lr_best"], dd),
                    p + "LowRankSwapBestBlock": fmt_num(s["lr_best_layer"], 0),
                    p + "Intact": fmt_num(s["base"], dd),
                    p + "SwapSpearman": fmt_r(s["swap_spearman"]),
                    p + "CorpusSpread": fmt_num(s["spread"], 3),
                    p + "GradGap": fmt_num(s["grad_gap"], 3),
                }
            )
        return out

    def numbers(self) -> dict[str, str]:
        """Macro name (without backslash) -> formatted value."""
        params, probe = self.params, self.probe
        main = probe.filter(pl.col("corpus").eq_missing(self.main))
        out: dict[str, str] = {
            "ProbeMainCorpus": corpus_name(self.main) if self.main else MISSING,
            "ProbeCorpora": join_words([corpus_name(c) for c in self.corpora]),
            "ProbeNumCorpora": str(len(self.corpora)),
            "ProbeSwapCorpora": join_words(
                [
                    corpus_name(c)
                    for c in self.corpora
                    if probe.filter(
                        (pl.col("corpus") == c) & pl.col("delta_linear").is_not_null()
                    ).height
                ]
            ),
            "ProbeModels": join_words([self.label(g, seeds=True) for g in self.groups]),
            "ProbeNumModels": str(len(self.groups)),
            "ProbePretrainedModels": join_words(
                [self.label(g) for g in self.groups if _key(g) != "pillm"]
            ),
            "ProbeEncoderModels": join_words([self.label(g) for g in self.groups if self.proxy(g)]),
            "ProbeQuantModels": join_words(
                [self.label(g) for g in self.groups if _QUANT.search(self.labels[g])]
            ),
            "ProbePillmSeeds": str(self.n_models["pillm"]) if "pillm" in self.groups else MISSING,
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
            "ProbeTrainRows": fmt_range(
                probe["n_train_rows"].min(), probe["n_train_rows"].max(), 0
            ),
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
        out.update(self._result_macros())
        out.update(self._gradient_macros())
        out.update(self._cost_macros())
        out.update(self.group_macros())
        return out

    def _main_blocks(self) -> list[dict]:
        if self.blocks.height == 0:
            return []
        return self.blocks.filter(pl.col("corpus").eq_missing(self.main)).to_dicts()

    def _result_macros(self) -> dict[str, str]:
        blocks = self._main_blocks()
        raw = self.probe.filter(pl.col("corpus").eq_missing(self.main)).to_dicts()
        out: dict[str, str] = {}

        def ext(name: str, col: str, largest: bool, digits: int, rows: list[dict]) -> None:
            r = _argext(rows, col, largest)
            out[f"Probe{name}"] = fmt_num(r[col] if r else None, digits)
            out[f"Probe{name}Where"] = self.where(r["model_group"], r["layer"]) if r else MISSING

        ext("RlinMin", "r2_lin", False, 3, blocks)
        ext("RlinMax", "r2_lin", True, 3, blocks)

        # Largest change of R²_lin between adjacent blocks of one model (seed means).
        jumps, profiles, non_monotone = [], 0, 0
        for g in self.groups:
            b = self.block_rows(g, self.main)
            vals = [(x["layer"], x["r2_lin"]) for x in b if finite(x["r2_lin"])]
            for (l0, v0), (l1, v1) in zip(vals, vals[1:], strict=False):
                jumps.append({"model_group": g, "layer": l0, "next": l1, "jump": abs(v1 - v0)})
            if len(vals) >= 3:
                profiles += 1
                diffs = [v1 - v0 for (_, v0), (_, v1) in zip(vals, vals[1:], strict=False)]
                non_monotone += int(any(d > 0 for d in diffs) and any(d < 0 for d in diffs))
        j = _argext(jumps, "jump", largest=True)
        out["ProbeAdjacentJump"] = fmt_num(j["jump"] if j else None, 3)
        out["ProbeAdjacentJumpWhere"] = (
            f"{self.label(j['model_group'])}, blocks {j['layer']}--{j['next']}" if j else MISSING
        )
        out["ProbeNumProfiles"] = str(profiles)
        out["ProbeNumNonMonotone"] = str(non_monotone)

        # Bilinear probe, pooled over all blocks (of all seeds).
        one_minus = [None if r["r2_lin"] is None else 1 - r["r2_lin"] for r in raw]
        gains = [r["bilinear_gain"] for r in raw]
        out["ProbeBilinearGainMean"] = fmt_num(mean_std(gains)[0], 3)
        ext("BilinearGainMax", "bilinear_gain", True, 3, blocks)
        out["ProbeBilinearPearson"] = fmt_r(pearson(one_minus, gains))
        out["ProbeBilinearPearsonN"] = str(n_pairs(one_minus, gains))

        # Global vs per-feature R².
        gaps = [
            {**b, "gap": b["r2_lin"] - b["r2_feature_median"]}
            for b in blocks
            if finite(b["r2_lin"]) and finite(b["r2_feature_median"])
        ]
        g = _argext(gaps, "gap", largest=True)
        out["ProbeFeatureGapMax"] = fmt_num(g["gap"] if g else None, 3)
        out["ProbeFeatureGapMaxWhere"] = self.where(g["model_group"], g["layer"]) if g else MISSING
        out["ProbeFeatureGapRank"] = fmt_num(g["effective_rank"] if g else None, 1)
        out["ProbeFeatureGapRlin"] = fmt_num(g["r2_lin"] if g else None, 3)
        ext("EffRankMin", "effective_rank", False, 1, blocks)
        ext("EffRankMax", "effective_rank", True, 1, blocks)
        out["ProbeRankSpearman"] = fmt_r(
            spearman([b["r2_lin"] for b in blocks], [b["effective_rank"] for b in blocks])
        )

        # Swaps: causal models (ΔPPL) and encoders (proxy) are never pooled.
        causal = [b for b in blocks if not is_proxy(b["kind"], b["swap_metric"])]
        enc = [b for b in blocks if is_proxy(b["kind"], b["swap_metric"])]
        ext("LinSwapBest", "delta_linear", False, 2, causal)
        ext("LinSwapWorst", "delta_linear", True, 2, causal)
        ext("LowRankSwapBest", "delta_lowrank", False, 2, causal)
        ext("LowRankSwapWorst", "delta_lowrank", True, 2, causal)
        ext("ProxySwapBest", "delta_linear", False, 4, enc)
        ext("ProxySwapWorst", "delta_linear", True, 4, enc)
        rel = [
            r["delta_linear"] / r["base_value"]
            if finite(r["delta_linear"]) and finite(r["base_value"]) and r["base_value"] > 0
            else None
            for r in raw
        ]
        causal_raw = [not is_proxy(r["kind"], r["swap_metric"]) for r in raw]
        r2c = [r["r2_lin"] if c else None for r, c in zip(raw, causal_raw, strict=True)]
        out["ProbeSwapSpearman"] = fmt_r(spearman(r2c, rel))
        out["ProbeSwapSpearmanN"] = str(n_pairs(r2c, rel))
        stats_ = [self.group_stats(g) for g in self.groups]
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
            for g in self.groups
            if (s := self.corpus_spread(g))
        ]
        sp = _argext(spreads, "spread", largest=True)
        out["ProbeCorpusSpreadMax"] = fmt_num(sp["spread"] if sp else None, 3)
        out["ProbeCorpusSpreadMaxWhere"] = (
            self.where(sp["model_group"], sp["layer"]) if sp else MISSING
        )
        return out

    def _gradient_macros(self) -> dict[str, str]:
        g = self.probe.filter(pl.col("grad_r2").is_not_null())
        recs = g.to_dicts()
        out = {
            "ProbeGradSteps": "/".join(fmt_num(v, 0) for v in _unique(g["grad_steps"].to_list()))
            or MISSING,
            "ProbeGradRows": "/".join(fmt_num(v, 0) for v in _unique(g["grad_rows"].to_list()))
            or MISSING,
            "ProbeGradLR": "/".join(fmt_lr(v) for v in _unique(g["grad_lr"].to_list())) or MISSING,
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
        hi = _argext(gaps, "gap", largest=True)
        lo = _argext(gaps, "gap", largest=False)
        out["ProbeGradGapMax"] = fmt_num(hi["gap"] if hi else None, 3)
        out["ProbeGradGapMaxWhere"] = self.where(hi["model_group"], hi["layer"]) if hi else MISSING
        out["ProbeGradGapMin"] = fmt_num(lo["gap"] if lo else None, 3)
        out["ProbeGradGapMean"] = fmt_num(mean_std(r["gap"] for r in gaps)[0], 3)
        return out

    def _cost_macros(self) -> dict[str, str]:
        jobs = self.jobs.to_dicts()
        total = sum(
            sum(
                r[c]
                for c in ("load_seconds", "capture_fit_seconds", "swap_seconds")
                if finite(r[c])
            )
            for r in jobs
        )
        rps = [r["rows_per_s"] for r in jobs if finite(r["rows_per_s"])]
        mem = [r["peak_mem_mb"] for r in jobs if finite(r["peak_mem_mb"])]
        return {
            "ProbeDevices": tex_escape(" / ".join(sorted(_unique(_device(r) for r in jobs))))
            or MISSING,
            "ProbeNumJobs": str(len(jobs)),
            "ProbeTotalMinutes": fmt_num(total / 60, 1) if jobs else MISSING,
            "ProbeRowsPerSec": fmt_range(min(rps), max(rps), 0) if rps else MISSING,
            "ProbePeakMem": fmt_num(max(mem), 0) if mem else MISSING,
        }


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
]


# ---------------------------------------------------------------- tables


def _stack(*lines: str) -> str:
    """A header cell of several centred lines (keeps wide tables narrow)."""
    return "\\shortstack{" + "\\\\{}".join(lines) + "}"  # {}: a line may start with [


def probe_tables(rep: ProbeReport) -> dict[str, dict[str, Any]]:
    """name -> template context (caption, label, colspec, header, rows) of the single tables."""
    main = corpus_name(rep.main) if rep.main else MISSING
    r = rep.params.get("bilinear_rank", MISSING)
    f = rep.params.get("low_rank_factor", MISSING)
    proxy = (
        f"{PROXY}: encoder without an LM head; the swap metric is the proxy $1-\\cos$ between the "
        "mean-pooled final hidden states of the swapped and the intact model (mean over windows), "
        "not a perplexity."
    )
    seeds = (
        "Multi-seed models: per-block values averaged over seeds first; $\\pm$ is the sample std "
        "over seeds."
    )
    return {
        "probe_summary": {
            "label": "tab:probe-summary",
            "colspec": "lrrrrrrrrrrr",
            "header": [
                "Model",
                "$L$",
                "$d$",
                _stack("$\\Rlin$ mean", "[min, max]"),
                _stack("Feat.", "med."),
                _stack("Bilin.", "gain"),
                "$r$",
                _stack("Lin.\\ swap", "best"),
                _stack("Lin.\\ swap", "worst"),
                _stack("Low-rank", "best"),
                _stack("FFN/", "lin."),
                _stack("FFN/", "low-rank"),
            ],
            "caption": f"Linear recoverability of the FFN blocks of every probed model on {main}. "
            "$L$: FFN blocks; $d$: FFN input width. $\\Rlin$: held-out $R^2$ of the closed-form "
            "affine fit, mean over blocks with the lowest and highest block. Feat.\\ med.: mean "
            "over blocks of the median per-coordinate held-out $R^2$. Bilin.\\ gain: mean held-out "
            f"$R^2$ added by the rank-{r} bilinear probe; $r$: Pearson correlation between "
            "$1-\\Rlin$ and that gain over all blocks (of all seeds). Swap columns: change of the "
            "metric when one block is replaced by its linear fit (best and worst block) or by the "
            "rank-$k$ truncation of that fit (best block), block index (from 0) in parentheses; "
            "$\\Delta\\PPL$ against the intact model for causal models. FFN/lin., FFN/low-rank: "
            f"parameters of the FFN block over those of its replacement ($k$ targets about {f}$"
            f"\\times$ fewer weights than the dense map). {proxy} {seeds} `--': not measured.",
        },
        "probe_corpora": {
            "label": "tab:probe-corpora",
            "colspec": "llrrrrrrr",
            "header": [
                "Model",
                "Corpus",
                _stack("Held-out", "rows"),
                _stack("$\\Rlin$", "mean"),
                _stack("$\\Rlin$ min", "(block)"),
                _stack("Bilin.", "gain"),
                "Intact",
                _stack("Mean lin.", "swap $\\Delta$"),
                _stack("Max $|\\Delta\\Rlin|$", "(block)"),
            ],
            "caption": "Linear recoverability on each corpus. Held-out rows: mean per block. "
            "Intact: perplexity of the unmodified model on the corpus's swap windows; mean lin.\\ "
            "swap $\\Delta$: mean over blocks of the change when one block at a time is replaced "
            "by its linear fit (`--' where no swaps were run on that corpus). Last column: the "
            "largest difference, over blocks, between the highest and lowest $\\Rlin$ of a block "
            f"across corpora, with its block (from 0). {proxy} {seeds}",
        },
        "probe_gradient": {
            "label": "tab:probe-gradient",
            "colspec": "llrrrrrrr",
            "header": [
                "Model",
                "Corpus",
                "Block",
                _stack("Closed", "form"),
                _stack("Gradient", "(last step)"),
                "Gap",
                "Steps",
                "Rows",
                "LR",
            ],
            "caption": "Gradient-trained versus closed-form linear maps for the probed blocks: "
            "held-out $R^2$ of the least-squares map fitted in closed form on the same fitting "
            "rows, of the map trained by AdamW from zero initialisation after its last step, and "
            "their difference (closed form minus gradient). Steps, rows and learning rate as "
            f"recorded by the runs. {seeds}",
        },
        "probe_cost": {
            "label": "tab:probe-cost",
            "colspec": "lllrrrrrr",
            "header": [
                "Model",
                "Corpus",
                "Device",
                "Rows",
                "Rows/s",
                "Load (s)",
                _stack("Capture", "+fit (s)"),
                _stack("Swaps", "(s)"),
                _stack("Peak mem.", "(MB)"),
            ],
            "caption": "Cost of each probing job (one model on one corpus): token rows captured "
            "per block, rows per second of the capture-and-fit phase (both passes over the rows "
            "and all solves), wall time to load the model, to capture and fit every block, and to "
            "run the block swaps (0 or `--' where none were run), and peak memory as the job "
            "recorded it (allocated GPU memory on a GPU, resident set size on a CPU).",
        },
    }


def render_probe_tables(
    summary_dir: str, params: dict, template_dir: str, tables_dir: str, numbers_path: str
) -> None:
    """Write probe_{summary,corpora,gradient,blocks,cost}.tex into ``tables_dir`` and the probe
    macros to ``numbers_path``, through the report contract."""
    probe, gradient, jobs = load_summaries(summary_dir)
    rep = ProbeReport(probe, gradient, jobs, params)
    rows = {
        "probe_summary": rep.summary_rows(),
        "probe_corpora": rep.corpora_rows(),
        "probe_gradient": rep.gradient_rows(),
        "probe_cost": rep.cost_rows(),
    }
    tables: dict[Path, Table | LongTable] = {
        Path(tables_dir) / f"{name}.tex": Table(rows=rows[name], **ctx)
        for name, ctx in probe_tables(rep).items()
    }
    header = [
        "Block",
        "$\\Rlin$",
        _stack("Feat.", "med."),
        _stack("Eff.", "rank"),
        _stack("Bilin.", "gain"),
        "$\\kappa$",
        "Solver",
        _stack("Lin.\\ swap", "$\\Delta$"),
        _stack("Low-rank", "$\\Delta$"),
        "$k$",
    ]
    blocks = [
        Table(t["caption"], t["label"], "rrrrrrlrrr", header, t["rows"], "!htbp", "scriptsize")
        for t in rep.block_tables()
    ]
    tables[Path(tables_dir) / "probe_blocks.tex"] = LongTable(
        blocks,
        "pillm.probe_report from the probe summaries",
        "No per-block probe results in this build.",
    )
    render_report(tables, rep.numbers(), template_dir, numbers_path,
                  "pillm.probe_report from the probe summaries", prefix="Probe")  # fmt: skip


def aggregate_probe(
    block_paths: list[str], gradient_paths: list[str], metrics_paths: list[str], out_dir: str
) -> None:
    """Probe jobs -> ``probe.parquet`` (one row per model x corpus x block), ``probe_gradient``
    (gradient-trained map curves) and ``probe_jobs`` (one row per job: cost and provenance)."""
    out = Path(out_dir)
    blocks = concat_parquet(block_paths)
    blocks = blocks.with_columns(pl.col("seed").cast(pl.Int64)).sort("model", "corpus", "layer")
    write_parquet(blocks, out / "probe.parquet")
    grads = concat_parquet(gradient_paths)
    write_parquet(grads.sort("model", "corpus", "layer", "step"), out / "probe_gradient.parquet")
    index = ["variant", "corpus", "model_group", "model_label", "device", "device_name"]
    jobs = pivot_records(metrics_paths, index).rename({"variant": "model"})
    write_parquet(jobs.sort("model", "corpus"), out / "probe_jobs.parquet")
