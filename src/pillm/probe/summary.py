"""The probe summaries as frames, and the statistics every probe table, macro and figure shares.

Inputs are the summaries written by the pipeline's probe aggregation: ``probe.parquet`` (one row
per model, corpus and block), ``probe_gradient.parquet`` (the gradient-trained linear map along
its steps) and ``probe_jobs.parquet`` (cost per probing job); they are read conformed to the
schemas below, so a build without some column or file still reports.

Conventions. A model group is one architecture and checkpoint family: the ``pillm`` group holds
one model per seed, every pretrained group one model. Per block, a group's value is the mean over
its models (seeds); where a spread matters it is the sample std over seeds (undefined, and left
out, for one model). Blocks are numbered from 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from scipy import stats

from pillm.data.sources import CORPUS_NAMES
from pillm.paper.latex import MISSING, finite, fmt_num, fmt_sci, macro_name, tex_escape

PROXY = "$^{\\dagger}$"
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
# The row policy's columns: R²_lin on all rows and without the massive-activation rule beside
# the kept rows' value, their bootstrap intervals over windows, where the held-out variance sits.
ROW_POLICY_COLS = [
    "r2_lin_all",
    "r2_lin_with_massive",
    "r2_lin_lo",
    "r2_lin_hi",
    "r2_lin_all_lo",
    "r2_lin_all_hi",
    "n_excluded_rows",
    "excluded_share",
    "outlier_k",
    "outlier_share",
    "r2_no_outliers",
    "outlier_share_all",
    "r2_no_outliers_all",
]
MEAN_COLS = [
    "r2_lin",
    "r2_feature_median",
    "effective_rank",
    "map_rank",
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
    *(c for c in ROW_POLICY_COLS if c != "outlier_k"),
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
    "row_policy",
    "outlier_k",
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
    "map_rank": pl.Float64,
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
    "grad_r2_start": pl.Float64,  # the zero map's held-out R² (step 0; probe.report)
    "grad_trained": pl.Float64,  # 1: held-out R² rose by probe.gradient.trained_gain or more
    "grad_steps": pl.Int64,
    "grad_rows": pl.Int64,
    "grad_lr": pl.Float64,
    "row_policy": pl.String,
    **{c: pl.Float64 for c in ROW_POLICY_COLS},
    "n_excluded_rows": pl.Int64,
    "n_massive_rows": pl.Int64,
    "outlier_k": pl.Int64,
    "n_fit_windows": pl.Int64,
    "n_heldout_windows": pl.Int64,
    "outlier_features": pl.String,
    "outlier_features_all": pl.String,
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


# ---------------------------------------------------------------- loading


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


def device_name(job: dict) -> str | None:
    """The device's name (e.g. the GPU model) where the job recorded one, else its id."""
    return job.get("device_name") or job.get("device")


# ---------------------------------------------------------------- model groups and corpora


def group_key(group: str) -> str:
    """A group's normalised id (lower-case letters and digits): 'Pythia-160m' -> 'pythia160m'."""
    return re.sub(r"[^a-z0-9]", "", group.lower())


def group_macro(group: str) -> str:
    """Macro infix of a model group, letters only.

    'gpt2' -> 'GPTTwo', 'pythia-160m' -> 'Pythia', unknown 'opt-125m' -> 'OptOneTwoFiveM'.
    """
    if group_key(group) in KNOWN_GROUPS:
        return KNOWN_GROUPS[group_key(group)]
    return macro_name(group)


def order_groups(groups: Iterable[str]) -> list[str]:
    rank = {k: i for i, k in enumerate(KNOWN_GROUPS)}
    return sorted(set(groups), key=lambda g: (rank.get(group_key(g), len(rank)), g))


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


# ---------------------------------------------------------------- statistics and number formats


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
    if float(rows.get("exclude_massive", 0) or 0) > 0:
        parts.append(
            f"in each block the rows whose FFN output norm exceeds {massive_factor(rows)} times "
            "the median row of their batch (massive activations of attention sinks elsewhere in "
            "the window)"
        )
    return join_words(parts, empty="no rows")


def massive_factor(rows: dict | None) -> str:
    """probe.rows.exclude_massive as the text quotes it: '20', '12.5'; '0' when the rule is off."""
    if not rows:
        return MISSING
    massive = float(rows.get("exclude_massive", 0) or 0)
    return fmt_num(massive, 0 if massive == int(massive) else 1)


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


def argext(rows: list[dict], col: str, largest: bool) -> dict | None:
    """The row with the smallest (or largest) finite ``col``; None when no row has one."""
    cand = [r for r in rows if finite(r.get(col))]
    if not cand:
        return None
    return (max if largest else min)(cand, key=lambda r: r[col])


def unique(values: Iterable[Any]) -> list[Any]:
    """The distinct non-None values, in first-seen order."""
    out: list[Any] = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return out
