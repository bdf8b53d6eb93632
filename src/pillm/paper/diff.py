"""What changed between two builds: metrics beyond seed noise, flipped claims, moved table cells.

A build (``pillm.paper.builds``) is a results folder (``results/<name>/``: ``summary/*.parquet``
and, where built, ``paper/generated/``) or a git revision's recorded copy, ``REV:PATH``. Each
study summary becomes one row per (item, metric) with mean, std and n over seeds; a metric is
listed when |Δmean| > ``sigmas`` x the standard error of the difference, sqrt(s_A²/n_A +
s_B²/n_B). Where a side has one seed there is no noise estimate: a relative change above ``rel``
is listed and flagged "no seed noise known". The rule screens each metric on its own: a listed
change shows its Welch t p-value, and the report says how many listings chance alone would give
(at 3 seeds a side, 2 SE passes an unchanged metric about 1 time in 9). Claims
(``summary/claims.parquet``) are listed when their verdict differs; generated tables are
compared cell by cell (``pillm.paper.texcells``: row and column named as a reader finds them)
and macro files value by value. Anything one side lacks is reported, never a crash. Costs
(times, memory, throughput) are listed apart: they follow the machine and its load more than
the code.
"""

from __future__ import annotations

import html
import io
import math
import re
from dataclasses import dataclass, field

import polars as pl
from scipy import stats

from pillm.core.records import write_text
from pillm.paper.builds import (
    GENERATED_DIRS,
    SUMMARY_DIRS,
    Build,
    DiffInputError,
    first_dir,
    open_build,
)
from pillm.paper.texcells import macro_values, table_cells

# ---- Metrics: every study summary as (item, metric) -> mean, std, n ------------------------

# Wide summaries: the columns naming an item; rows sharing them are seeds (replicates).
ITEM_KEYS: dict[str, list[str]] = {
    "probe.parquet": ["model_group", "corpus", "layer"],
    "probe_jobs.parquet": ["model_group", "corpus"],
    "probe_gradient.parquet": ["model_group", "corpus", "layer", "step"],
    "generative.parquet": ["dataset", "setting"],
    "generative_samplers.parquet": ["dataset", "setting", "sampler", "steps"],
    "generative_classifiers.parquet": ["dataset"],
    "lora.parquet": ["model_group", "method"],
    "generative_lr.parquet": ["dataset", "family", "lr"],  # one row per grid rate
    "generative_speed.parquet": ["dataset", "family"],
    "sensitivity.parquet": ["point", "lr", "dropout"],
}
# Per-seed records and curves: their aggregates are the summaries above.
NOT_COMPARED = {
    "runs.parquet": "per-seed records (lm.parquet holds their mean/std/n)",
    "saffu_runs.parquet": "per-seed records (saffu.parquet holds their mean/std/n)",
    "curves.parquet": "training curves",
    "saffu_curves.parquet": "training curves",
    "generative_curves.parquet": "curves",
    "lora_curves.parquet": "curves",
    "generative_lr_curves.parquet": "curves",
    "sensitivity_runs.parquet": "per-seed records (sensitivity.parquet holds their means)",
    "samples.parquet": "generated text",
    "solves.parquet": "λ-sweep records",
    "claims.parquet": "compared as claims",
}
# Columns that describe where or how a row was made, not what it is.
PROVENANCE = {
    "device",
    "device_name",
    "git_rev",
    "weights_sha256",
    "config_hash",
    "seed",
    "seeds",
    "n_expected",
    "cuda",
    "cuda_visible_devices",
    "numpy",
    "python",
    "torch",
}
COST = re.compile(r"time|seconds|(^|_)s$|per_s|memory|mem_mb|_mb$|compiled|cuda_graphs")
# Labels of the data an item was measured on: compared as context, not part of its identity
# (a new tokenizer is one listed change, not every metric "only in A" and "only in B").
CONTEXT = ("tokenizer", "data_policy")
EMPTY = {
    "key": pl.String,
    "metric": pl.String,
    "mean": pl.Float64,
    "std": pl.Float64,
    "n": pl.Int64,
}


def metric_rows(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """One row per item x metric: ``key`` (the item's identity as text, 'col=value; ...'),
    ``metric``, ``mean``, ``std`` (null for one seed), ``n``. An aggregated summary (columns
    metric/mean/std/n, as lm.parquet) is taken as it is; a wide one is grouped by its item
    columns (``ITEM_KEYS``), the rows of one item being its seeds."""
    skip = PROVENANCE | set(CONTEXT)
    if {"metric", "mean", "std", "n"} <= set(df.columns):
        # The item: its label columns; float columns (ci95, ...) are statistics, not names.
        keys = [
            c
            for c in df.columns
            if c not in {"metric", "mean", "std", "n"} | skip
            and not df[c].dtype.is_float()
            and not isinstance(df[c].dtype, pl.List)
        ]
        long = df.select(*keys, "metric", "mean", "std", pl.col("n").cast(pl.Int64))
    else:
        keys = [c for c in ITEM_KEYS.get(name, _guess_keys(df)) if c in df.columns]
        values = [
            c for c in df.columns if c not in keys and c not in skip and df[c].dtype.is_numeric()
        ]
        if not values:
            return pl.DataFrame(schema=EMPTY)
        long = (
            df.select(*keys, *(pl.col(c).cast(pl.Float64) for c in values))
            .unpivot(index=keys, on=values, variable_name="metric")
            .drop_nulls("value")  # a metric a row does not have is absent, not a zero
            .group_by(*keys, "metric")
            .agg(
                pl.col("value").mean().alias("mean"),
                pl.col("value").std().alias("std"),  # sample std over seeds; null for one
                pl.len().cast(pl.Int64).alias("n"),
            )
        )
    parts = [pl.format(f"{k}={{}}", pl.col(k).cast(pl.String).fill_null("-")) for k in keys]
    key = pl.concat_str(parts, separator="; ") if keys else pl.lit("")
    return long.select(key.alias("key"), "metric", "mean", "std", "n")


def _guess_keys(df: pl.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in PROVENANCE and not df[c].dtype.is_float()]


@dataclass(frozen=True)
class Change:
    """One listed difference. ``kind``: noise (beyond seed noise), no_noise (a side with one
    seed: above the relative threshold), only_a / only_b (on one side), flip (a claim's
    verdict), cell (a table cell), macro (a macro value), context (data or tokenizer labels)."""

    section: str
    where: str
    what: str
    a: str
    b: str
    kind: str
    note: str = ""


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return "nan" if math.isnan(x) else f"{x:.6g}"


def _mean_std(mean: float | None, std: float | None, n: int | None) -> str:
    if n is None:
        return "-"
    s = _num(mean) + (f" ± {_num(std)}" if std is not None and not math.isnan(std) else "")
    return f"{s} (n={n})"


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key without the 'col=value' parts every key shares (experiment=lm, ...)."""
    split = {k: k.split("; ") for k in keys}
    common = set.intersection(*(set(p) for p in split.values())) if split else set()
    return {k: "; ".join(p for p in ps if p not in common) or k for k, ps in split.items()}


def _metric_change(
    r: dict, sigmas: float, rel: float, chance: list[float] | None = None
) -> tuple[str, str] | None:
    """(kind, note) when the metric of row ``r`` (A's columns, then B's with suffix _b)
    changed beyond noise or, without noise, beyond ``rel``; None when it did not. Where the
    noise is known, ``chance`` gets the probability that an unchanged metric passes the rule
    (two-sided Welch t tail at ``sigmas``)."""
    ma, mb, na, nb = r["mean"], r["mean_b"], r["n"], r["n_b"]
    sa, sb = r["std"], r["std_b"]
    noise = na >= 2 and nb >= 2 and all(x is not None and not math.isnan(x) for x in (sa, sb))
    if noise:
        va, vb = sa**2 / na, sb**2 / nb
        se = math.sqrt(va + vb)  # standard error of the difference of means
        # Welch-Satterthwaite degrees of freedom: how heavy the tails of Δ/SE are.
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)) if se > 0 else math.inf
        if chance is not None:
            chance.append(float(2 * stats.t.sf(sigmas, df)) if se > 0 else 0.0)
    if ma is None or mb is None or math.isnan(ma) or math.isnan(mb):
        same = (ma is None) == (mb is None) and (ma is None or math.isnan(ma) == math.isnan(mb))
        return None if same else ("no_noise", "became missing or NaN")
    delta, scale = mb - ma, max(abs(ma), abs(mb))
    if scale == 0 or abs(delta) <= 1e-12 * scale:  # the same number, up to float round-off
        return None
    if noise:
        if abs(delta) <= sigmas * se:
            return None
        if se == 0:
            return "noise", f"Δ={_num(delta)}; no spread over seeds on either side"
        z = abs(delta) / se
        p = 2 * stats.t.sf(z, df)
        return "noise", f"Δ={_num(delta)} = {z:.1f} x its standard error (Welch p={p:.2g})"
    if abs(delta) / scale <= rel:
        return None
    return "no_noise", f"Δ={_num(delta)} ({100 * delta / abs(ma) if ma else math.inf:+.1f}%)"


def compare_metrics(
    name: str,
    a: pl.DataFrame,
    b: pl.DataFrame,
    sigmas: float,
    rel: float,
    chance: list[float] | None = None,
) -> list[Change]:
    """The changes of one summary between builds (see the module docstring for the rule):
    metrics beyond noise, items one build lacks (one line per item), changed context labels.
    ``chance``: see ``_metric_change``."""
    out: list[Change] = []
    for col in CONTEXT:
        va = sorted(a[col].drop_nulls().unique().to_list()) if col in a.columns else []
        vb = sorted(b[col].drop_nulls().unique().to_list()) if col in b.columns else []
        if va != vb:
            out.append(
                Change("context", name, col, "; ".join(va) or "-", "; ".join(vb) or "-", "context")
            )
    ra, rb = metric_rows(name, a), metric_rows(name, b)
    both = ra.join(rb, on=["key", "metric"], how="full", suffix="_b", coalesce=True)
    short = _short_keys(both["key"].unique().to_list())
    only: dict[tuple[str, str, str], list[str]] = {}
    for r in both.sort("key", "metric").iter_rows(named=True):
        section = "cost" if COST.search(r["metric"]) else "metrics"
        where = f"{name} [{short[r['key']]}]"
        if r["n"] is None or r["n_b"] is None:
            only.setdefault(
                (section, where, "only_a" if r["n_b"] is None else "only_b"), []
            ).append(r["metric"])
            continue
        found = _metric_change(r, sigmas, rel, chance)
        if found:
            sa, sb = (
                _mean_std(r["mean"], r["std"], r["n"]),
                _mean_std(r["mean_b"], r["std_b"], r["n_b"]),
            )
            out.append(Change(section, where, r["metric"], sa, sb, *found))
    for (section, where, kind), metrics in only.items():
        out.append(_one_side(section, where, kind, metrics, "metrics"))
    return out


# ---- Claims ---------------------------------------------------------------------------------


# claims.parquet as pillm.paper.claims writes it (id, diff, ci_lo, ci_hi) or in the long names.
CLAIM_NAMES = {"id": "claim_id", "diff": "diff_mean", "ci_lo": "ci_low", "ci_hi": "ci_high"}
CLAIM_COLUMNS = ("claim_id", "verdict", "diff_mean", "ci_low", "ci_high", "agree", "n")


def _claim_rows(side: str, df: pl.DataFrame) -> pl.DataFrame:
    df = df.rename(
        {k: v for k, v in CLAIM_NAMES.items() if k in df.columns and v not in df.columns}
    )
    missing = {"claim_id", "verdict"} - set(df.columns)
    if missing:
        raise DiffInputError(
            f"claims.parquet of build {side} lacks columns {sorted(missing)} "
            "(pillm.paper.claims writes id and verdict; rebuild the claims rule)"
        )
    return df.select(
        pl.col("claim_id").cast(pl.String),
        pl.col("verdict").cast(pl.String),
        *(
            pl.col(c).cast(pl.Float64) if c in df.columns else pl.lit(None, pl.Float64).alias(c)
            for c in CLAIM_COLUMNS[2:]
        ),
    )


def _claim_text(r: dict, s: str = "") -> str:
    """'verdict, Δ=..., CI [lo, hi], agree/n' of one side (``s``: '' for A, '_b' for B)."""
    parts = [str(r["verdict" + s])]
    if r["diff_mean" + s] is not None:
        parts.append(f"Δ={_num(r['diff_mean' + s])}")
    if r["ci_low" + s] is not None:
        parts.append(f"CI [{_num(r['ci_low' + s])}, {_num(r['ci_high' + s])}]")
    if r["n" + s] is not None:
        agree = f"{r['agree' + s]:.0f}/" if r["agree" + s] is not None else "n="
        parts.append(f"{agree}{r['n' + s]:.0f} seeds")
    return ", ".join(parts)


def compare_claims(a: pl.DataFrame, b: pl.DataFrame) -> list[Change]:
    """Every claim whose verdict differs between the builds, or which one build lacks."""
    both = _claim_rows("A", a).join(
        _claim_rows("B", b), on="claim_id", how="full", suffix="_b", coalesce=True
    )
    out = []
    for r in both.sort("claim_id").iter_rows(named=True):
        va, vb = r["verdict"], r["verdict_b"]
        ta = _claim_text(r) if va is not None else "-"
        tb = _claim_text(r, "_b") if vb is not None else "-"
        if va is None or vb is None:
            out.append(
                Change(
                    "claims",
                    "claims.parquet",
                    r["claim_id"],
                    ta,
                    tb,
                    "only_a" if vb is None else "only_b",
                )
            )
        elif va != vb:
            out.append(Change("claims", "claims.parquet", r["claim_id"], ta, tb, "flip"))
    return out


# ---- Tables and macros ----------------------------------------------------------------------


def _one_side(section: str, where: str, kind: str, names: list[str], what: str) -> Change:
    """One line for everything under ``where`` that only one build has."""
    listed = ", ".join(names) if len(names) <= 4 else f"{len(names)} {what}"
    a, b = ("present", "-") if kind == "only_a" else ("-", "present")
    return Change(section, where, listed, a, b, kind)


def compare_tables(name: str, tex_a: str, tex_b: str) -> list[Change]:
    """Cells whose text differs; cells one build lacks, one line per row."""
    ca, cb = table_cells(tex_a), table_cells(tex_b)
    out, only = [], {}
    for key in list(ca) + [k for k in cb if k not in ca]:
        (table, row, col), va, vb = key, ca.get(key), cb.get(key)
        if va is None or vb is None:
            side = "only_a" if vb is None else "only_b"
            only.setdefault((table, side, row), []).append(col)
        elif va != vb:
            out.append(Change("tables", f"{name} [{table}]", f"{row} | {col}", va, vb, "cell"))
    rows_a, rows_b = {k[:2] for k in ca}, {k[:2] for k in cb}
    for (table, side, row), cols in only.items():
        whole = (table, row) not in (rows_b if side == "only_a" else rows_a)
        what = f"row {row} ({len(cols)} cells)" if whole else f"{row} | {', '.join(cols)}"
        out.append(_one_side("tables", f"{name} [{table}]", side, [what], "rows"))
    return out


def compare_macros(name: str, tex_a: str, tex_b: str) -> list[Change]:
    """Macros whose value differs; those one build lacks, one line per build."""
    ma, mb = macro_values(tex_a), macro_values(tex_b)
    out = [
        Change("macros", name, "\\" + k, ma[k], mb[k], "macro")
        for k in sorted(set(ma) & set(mb))
        if ma[k] != mb[k]
    ]
    for side, names in (("only_a", set(ma) - set(mb)), ("only_b", set(mb) - set(ma))):
        if names:
            out.append(_one_side("macros", name, side, ["\\" + k for k in sorted(names)], "macros"))
    return out


# ---- The whole diff -------------------------------------------------------------------------


@dataclass
class BuildDiff:
    a: str
    b: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why
    # Per metric compared against its seed noise: the chance an unchanged one is listed.
    chance: list[float] = field(default_factory=list)

    def chance_line(self) -> str:
        """How many listed metrics chance alone would give: the screen is per metric."""
        if not self.chance:
            return "No metric had seed noise on both sides."
        return (
            f"{len(self.chance)} metrics had seed noise on both sides; if none had changed, "
            f"about {sum(self.chance):.1f} would be listed by chance at this rule."
        )

    def section(self, name: str) -> list[Change]:
        """The changes of one section, grouped by kind (``KIND_TEXT``'s order)."""
        order = list(KIND_TEXT)
        return sorted(
            (c for c in self.changes if c.section == name), key=lambda c: order.index(c.kind)
        )


SECTIONS = {
    "claims": "Claims whose verdict flipped",
    "context": "Data and tokenizer labels that changed",
    "metrics": "Metrics that changed (beyond seed noise; flagged where no seed noise is known)",
    "tables": "Table cells that moved",
    "macros": "Paper numbers (macros) that moved",
    "cost": "Costs that changed (time, memory, throughput: machine- and load-dependent)",
}
# Kinds in the order a section lists them, with their text.
KIND_TEXT = {
    "flip": "FLIPPED",
    "context": "changed",
    "noise": "beyond noise",
    "no_noise": "NO SEED NOISE KNOWN",
    "cell": "moved",
    "macro": "moved",
    "only_a": "only in A",
    "only_b": "only in B",
}


def diff_builds(a: Build, b: Build, sigmas: float = 2.0, rel: float = 0.01) -> BuildDiff:
    """Compare two builds: summaries, claims, generated tables and macro files."""
    d = BuildDiff(a.label, b.label)
    sa, sb = first_dir(a, SUMMARY_DIRS, ".parquet"), first_dir(b, SUMMARY_DIRS, ".parquet")
    for side, build, s in (("A", a, sa), ("B", b, sb)):
        if s is None:
            d.notes.append(
                f"build {side} ({build.label}) has no summary/*.parquet: no metrics compared"
            )
    if sa is not None and sb is not None:
        files_a, files_b = set(a.files(sa)), set(b.files(sb))
        for name in sorted(files_a | files_b):
            if not name.endswith(".parquet"):
                continue
            if name not in files_a or name not in files_b:
                side = "B" if name in files_a else "A"
                d.notes.append(f"summary/{name} missing in build {side}: not compared")
                continue
            fa = pl.read_parquet(io.BytesIO(a.read(f"{sa}/{name}".lstrip("/"))))
            fb = pl.read_parquet(io.BytesIO(b.read(f"{sb}/{name}".lstrip("/"))))
            if name == "claims.parquet":
                d.changes += compare_claims(fa, fb)
            elif name in NOT_COMPARED:
                continue
            else:
                d.changes += compare_metrics(name, fa, fb, sigmas, rel, d.chance)
        if "claims.parquet" not in files_a & files_b:
            d.notes.append("claims: summary/claims.parquet not in both builds: no claims compared")
    ga, gb = first_dir(a, GENERATED_DIRS, ".tex"), first_dir(b, GENERATED_DIRS, ".tex")
    ta = first_dir(a, tuple(f"{g}/tables".lstrip("/") for g in GENERATED_DIRS), ".tex")
    tb = first_dir(b, tuple(f"{g}/tables".lstrip("/") for g in GENERATED_DIRS), ".tex")
    if ta is None or tb is None:
        d.notes.append("tables: generated tables (paper/generated/tables/*.tex) not in both builds")
    else:
        _compare_tex(d, a, b, ta, tb, compare_tables, "table")
    if ga is None or gb is None:
        d.notes.append("macros: generated macro files (*numbers.tex) not in both builds")
    else:
        _compare_tex(d, a, b, ga, gb, compare_macros, "macro file")
    return d


def _compare_tex(d: BuildDiff, a: Build, b: Build, da: str, db: str, compare, what: str) -> None:
    fa = {f for f in a.files(da) if f.endswith(".tex")}
    fb = {f for f in b.files(db) if f.endswith(".tex")}
    for name in sorted(fa | fb):
        if name not in fa or name not in fb:
            d.notes.append(f"{what} {name} only in build {'A' if name in fa else 'B'}")
            continue
        ta, tb = a.read(f"{da}/{name}".lstrip("/")), b.read(f"{db}/{name}".lstrip("/"))
        d.changes += compare(name, ta.decode(), tb.decode())


# ---- Output: text and HTML -----------------------------------------------------------------


def render_text(d: BuildDiff) -> str:
    lines = [f"A: {d.a}", f"B: {d.b}"]
    for sec, title in SECTIONS.items():
        rows = d.section(sec)
        lines.append(f"\n{title}: {len(rows) or 'none'}")
        if sec == "metrics":
            lines.append(f"  {d.chance_line()}")
        for c in rows:
            note = f"  ({c.note})" if c.note else ""
            lines.append(f"  [{KIND_TEXT[c.kind]}] {c.where} {c.what}: {c.a} -> {c.b}{note}")
    if d.notes:
        lines.append("\nNot compared:")
        lines += [f"  {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


CSS = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eee}
tr.noise td.b{background:#ffd8a8}tr.no_noise td.b{background:#fff3bf}tr.flip td.b{background:#ffc9c9}
tr.cell td.b,tr.macro td.b,tr.context td.b{background:#d0ebff}tr.only_a,tr.only_b{color:#666}
.kind{font-size:smaller;white-space:nowrap}"""


def render_html(d: BuildDiff) -> str:
    e = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>pillm diff</title>"
        f"<style>{CSS}</style></head><body><h1>pillm diff</h1>"
        f"<p>A: <code>{e(d.a)}</code><br>B: <code>{e(d.b)}</code></p>"
    ]
    for sec, title in SECTIONS.items():
        rows = d.section(sec)
        parts.append(f"<h2>{e(title)}: {len(rows) or 'none'}</h2>")
        if sec == "metrics":
            parts.append(f"<p>{e(d.chance_line())}</p>")
        if not rows:
            continue
        parts.append(
            "<table><tr><th>change</th><th>where</th><th>what</th><th>A</th><th>B</th><th>note</th></tr>"
        )
        for c in rows:
            parts.append(
                f"<tr class='{c.kind}'><td class='kind'>{e(KIND_TEXT[c.kind])}</td><td>{e(c.where)}</td>"
                f"<td>{e(c.what)}</td><td>{e(c.a)}</td><td class='b'>{e(c.b)}</td><td>{e(c.note)}</td></tr>"
            )
        parts.append("</table>")
    if d.notes:
        parts.append(
            "<h2>Not compared</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in d.notes) + "</ul>"
        )
    return "\n".join(parts) + "</body></html>\n"


def diff_command(
    a: str, b: str, html_out: str | None, sigmas: float, rel: float, repo: str
) -> BuildDiff:
    """``pillm diff A B``: print the changes; write the HTML page when ``html_out`` is given."""
    d = diff_builds(open_build(a, repo), open_build(b, repo), sigmas=sigmas, rel=rel)
    print(render_text(d), end="")
    if html_out:
        write_text(html_out, render_html(d))
    return d
