"""What changed between two builds: metrics beyond seed noise, flipped claims, moved table cells.

A build (``pillm.paper.diff.builds``) is a results folder (``results/<name>/``: ``summary/*.parquet``
and, where built, ``paper/generated/``) or a git revision's recorded copy, ``REV:PATH``. Each
study summary becomes one row per (item, metric) with mean, std and n over seeds, its items named
by the key columns the summary declares (``pillm.paper.diff.keys``); a metric is listed when
|Δmean| > ``sigmas`` x the standard error of the difference, sqrt(s_A²/n_A + s_B²/n_B). Where a
side has one seed there is no noise estimate: a relative change above ``rel`` is listed and
flagged "no seed noise known". The rule screens each metric on its own: a listed change shows its
Welch t p-value, and the report says how many listings chance alone would give (at 3 seeds a
side, 2 SE passes an unchanged metric about 1 time in 9). Claims (``summary/claims.parquet``) are
listed when their verdict differs; generated tables are compared cell by cell (row and column
named as a reader finds them) and macro files value by value. Anything one side lacks is
reported, never a crash; a key that names two rows of one build stops the diff (its pairing would
be arbitrary). Costs (times, memory, throughput) are listed apart: they follow the machine and its
load more than the code.

The modules: ``builds`` (reading a build), ``keys`` (each summary's item keys), ``metrics``,
``claims`` and ``tex`` (the comparisons), ``changes`` (what they return), ``render`` (text, HTML).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import polars as pl

from pillm.core.records import write_text
from pillm.paper.diff.builds import (
    GENERATED_DIRS,
    SUMMARY_DIRS,
    Build,
    DiffInputError,
    first_dir,
    open_build,
)
from pillm.paper.diff.changes import BuildDiff, Change
from pillm.paper.diff.claims import compare_claims
from pillm.paper.diff.keys import NOT_COMPARED, SUMMARY_KEYS
from pillm.paper.diff.metrics import compare_metrics
from pillm.paper.diff.render import render_html, render_text
from pillm.paper.diff.tex import compare_macros, compare_tables

# The CLI row (pillm.paper.commands) names diff_command and DiffInputError in this package.
__all__ = ["BuildDiff", "DiffInputError", "diff_builds", "diff_command"]


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
            if name == "claims.parquet":
                d.changes += compare_claims(_summary(a, sa, name), _summary(b, sb, name))
            elif name in SUMMARY_KEYS:
                fa, fb = _summary(a, sa, name), _summary(b, sb, name)
                d.changes += compare_metrics(name, fa, fb, sigmas, rel, d.chance)
            elif name not in NOT_COMPARED:
                d.notes.append(
                    f"summary/{name}: no item keys in pillm.paper.diff.keys.SUMMARY_KEYS: "
                    "not compared"
                )
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


def _summary(build: Build, folder: str, name: str) -> pl.DataFrame:
    return pl.read_parquet(io.BytesIO(build.read(f"{folder}/{name}".lstrip("/"))))


def _compare_tex(
    d: BuildDiff,
    a: Build,
    b: Build,
    da: str,
    db: str,
    compare: Callable[[str, str, str], list[Change]],
    what: str,
) -> None:
    fa = {f for f in a.files(da) if f.endswith(".tex")}
    fb = {f for f in b.files(db) if f.endswith(".tex")}
    for name in sorted(fa | fb):
        if name not in fa or name not in fb:
            d.notes.append(f"{what} {name} only in build {'A' if name in fa else 'B'}")
            continue
        ta, tb = a.read(f"{da}/{name}".lstrip("/")), b.read(f"{db}/{name}".lstrip("/"))
        d.changes += compare(name, ta.decode(), tb.decode())


def diff_command(
    a: str, b: str, html_out: str | None, sigmas: float, rel: float, repo: str
) -> BuildDiff:
    """``pillm diff A B``: print the changes; write the HTML page when ``html_out`` is given."""
    d = diff_builds(open_build(a, repo), open_build(b, repo), sigmas=sigmas, rel=rel)
    print(render_text(d), end="")
    if html_out:
        write_text(html_out, render_html(d))
    return d
