"""Metrics of one study summary in two builds: which moved beyond seed noise.

A metric is listed when |Δmean| > ``sigmas`` x the standard error of the difference,
sqrt(s_A²/n_A + s_B²/n_B). Where a side has one seed there is no noise estimate: a relative
change above ``rel`` is listed and flagged "no seed noise known". Costs (times, memory,
throughput) are listed in a section of their own: they follow the machine and its load more than
the code.
"""

from __future__ import annotations

import math
import re

import polars as pl
from scipy import stats

from pillm.paper.diff.changes import Change, mean_std, num, one_side
from pillm.paper.diff.keys import CONTEXT, metric_rows

COST = re.compile(r"time|seconds|(^|_)s$|per_s|memory|mem_mb|_mb$|compiled|cuda_graphs")


def short_keys(keys: list[str]) -> dict[str, str]:
    """Each key without the 'col=value' parts every key shares (experiment=lm, ...)."""
    split = {k: k.split("; ") for k in keys}
    common = set.intersection(*(set(p) for p in split.values())) if split else set()
    return {k: "; ".join(p for p in ps if p not in common) or k for k, ps in split.items()}


def metric_change(
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
            return "noise", f"Δ={num(delta)}; no spread over seeds on either side"
        z = abs(delta) / se
        p = 2 * stats.t.sf(z, df)
        return "noise", f"Δ={num(delta)} = {z:.1f} x its standard error (Welch p={p:.2g})"
    if abs(delta) / scale <= rel:
        return None
    return "no_noise", f"Δ={num(delta)} ({100 * delta / abs(ma) if ma else math.inf:+.1f}%)"


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
    ``chance``: see ``metric_change``."""
    out: list[Change] = []
    for col in CONTEXT:
        va = sorted(a[col].drop_nulls().unique().to_list()) if col in a.columns else []
        vb = sorted(b[col].drop_nulls().unique().to_list()) if col in b.columns else []
        if va != vb:
            out.append(
                Change("context", name, col, "; ".join(va) or "-", "; ".join(vb) or "-", "context")
            )
    # metric_rows checks each side's (key, metric) unique: the join pairs one row with one row.
    ra, rb = metric_rows(name, a, "A"), metric_rows(name, b, "B")
    both = ra.join(rb, on=["key", "metric"], how="full", suffix="_b", coalesce=True)
    short = short_keys(both["key"].unique().to_list())
    only: dict[tuple[str, str, str], list[str]] = {}
    for r in both.sort("key", "metric").iter_rows(named=True):
        section = "cost" if COST.search(r["metric"]) else "metrics"
        where = f"{name} [{short[r['key']]}]"
        if r["n"] is None or r["n_b"] is None:
            only.setdefault(
                (section, where, "only_a" if r["n_b"] is None else "only_b"), []
            ).append(r["metric"])
            continue
        found = metric_change(r, sigmas, rel, chance)
        if found:
            sa, sb = (
                mean_std(r["mean"], r["std"], r["n"]),
                mean_std(r["mean_b"], r["std_b"], r["n_b"]),
            )
            out.append(Change(section, where, r["metric"], sa, sb, *found))
    for (section, where, kind), metrics in only.items():
        out.append(one_side(section, where, kind, metrics, "metrics"))
    return out
