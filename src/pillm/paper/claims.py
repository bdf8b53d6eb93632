"""Executable claims: every direction the paper states, evaluated from the summaries.

``paper/claims/<study>.yaml`` declares each study's claims (metric, two arms, a test); each study's
aggregate rule hands over ``summary/claims/<study>.parquet`` (``pillm.paper.claim_frame``).
``evaluate`` pairs the two arms seed by seed (the same seed in both), takes the mean difference
``a - b``, a 95 % t interval over seeds and, from ``bootstrap.min_seeds`` seeds on, a seeded
percentile bootstrap of the mean, and counts the seeds whose difference has the mean's sign; an
``interval`` claim takes the difference and interval the study computed (over blocks, windows);
where the study declines the comparison it writes a guard row of the same arms instead
(``pillm.paper.verdicts.GUARDS``), whose metric is the verdict ("too few blocks", "not
evaluated") and whose difference and interval are quoted as evidence, with no direction.
A direction is stated only where every interval of the record excludes zero; otherwise the
sentence says the arms are indistinguishable at n seeds (one seed gives no interval, and the
sentence says so). An arm or study the build does not run makes the claim "not run", never an
error. Every paired difference exactly 0 is "identical by construction", not an agreement of
seeds.

Gradient opponents: a claims file lists under ``opponents:`` the arms trained by gradient
descent (names or ``fnmatch`` patterns, as ``*/attn_only``); their study's frame records, per
arm and seed, whether training lowered the training loss (seed rows of metric ``trained``, 1 or
0, by the study's own declared threshold; ``pillm.paper.trained``). A claim
naming an opponent that did not train at one of its paired seeds is not evaluated: its verdict
is "opponent did not train" and its sentence says which arm and seeds.

Multiple comparisons: each claim with an interval over seeds gets the p-value of its paired t
test (equivalence: the larger of the two one-sided tests against the margin); across every
study's claims, Holm's and Benjamini-Hochberg's adjustments are reported beside the unadjusted
verdicts (``adjust``). The verdicts themselves stay those of the intervals.

The sentences, macros and appendix table are ``pillm.paper.claim_text``'s; the claims rule's job
(claims parquet, macro file, flip report and history) is ``pillm.paper.claim_report``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml
from scipy import stats

from pillm.paper.claim_text import sentence
from pillm.paper.tidy import ci95, loss_share
from pillm.paper.verdicts import (
    ALPHA,
    BOOTSTRAP,
    GUARDS,
    HOLDS,
    IDENTICAL,
    INDISTINGUISHABLE,
    NO_INTERVAL,
    NO_SEEDS,
    NOT_EQUIVALENT,
    NOT_RUN,
    ONE_SEED,
    OPPONENT_UNTRAINED,
    REVERSED,
    TRAINED_METRIC,
    ClaimsError,
    Result,
)

TESTS = ("direction", "equivalence", "share_sum", "interval")


@dataclass(frozen=True)
class Claim:
    id: str
    study: str
    metric: str
    a: str
    b: str
    test: str
    margin: float | None = None
    reference: str | None = None
    group: str | None = None
    opponents: tuple[str, ...] = ()  # the arms of this claim listed under ``opponents:``


# ---- the claims file ---------------------------------------------------------------------------


def load_claims(paths: list[str] | str | Path) -> tuple[list[Claim], dict[str, dict[str, Any]]]:
    """Every declared claim and each study's settings (metrics, names, groups, bootstrap).

    One file per study: ``paper/claims/<study>.yaml`` declares the claims on that study's frame;
    the study is the file's stem. Claim ids are unique across files (their macro names are).
    """
    claims: list[Claim] = []
    specs: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    for path in [paths] if isinstance(paths, str | Path) else paths:
        study = Path(path).stem
        spec = yaml.safe_load(Path(path).read_text()) or {}
        spec["bootstrap"] = {**BOOTSTRAP, **(spec.get("bootstrap") or {})}
        spec.setdefault("metrics", {})
        spec["opponents"] = _opponents(spec.get("opponents"), path)
        spec["study"] = study
        if study in specs:
            raise ClaimsError(f"{path}: a second claims file for study '{study}'")
        specs[study] = spec
        for i, c in enumerate(spec.get("claims") or []):
            claims.append(_claim(c, study, spec, f"{path}: claims[{i}] ({c.get('id', '?')})"))
            if claims[-1].id in seen:
                raise ClaimsError(f"{path}: claim id '{claims[-1].id}' is also declared in "
                                  f"{seen[claims[-1].id]}; give each claim its own")  # fmt: skip
            seen[claims[-1].id] = str(path)
        named = {v for c in claims if c.study == study for v in (c.a, c.b)}
        if stray := sorted(p for p in spec["opponents"] if not _matches(named, p)):
            raise ClaimsError(f"{path}: opponents {stray} match no arm of a claim in this file")
    return claims, specs


def _matches(arms: Any, pattern: str) -> bool:
    return any(fnmatchcase(a, pattern) for a in arms)


def _opponents(value: Any, path: str | Path) -> list[str]:
    if value is None:
        return []
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ClaimsError(f"{path}: opponents must be a list of arm names (the gradient-trained "
                          f"arms whose frame rows record '{TRAINED_METRIC}'), got {value!r}")  # fmt: skip
    return value


def _claim(c: Mapping[str, Any], study: str, spec: Mapping[str, Any], where: str) -> Claim:
    for key in ("id", "metric", "arms", "test"):
        if key not in c:
            raise ClaimsError(f"{where}: missing key '{key}'")
    if c.get("study", study) != study:
        raise ClaimsError(f"{where}: study '{c['study']}' in the file of study '{study}'")
    if c["test"] not in TESTS:
        raise ClaimsError(f"{where}: test must be one of {list(TESTS)}")
    if c["metric"] not in spec["metrics"]:
        raise ClaimsError(f"{where}: metric '{c['metric']}' not under metrics: (add it)")
    if not (isinstance(c["arms"], list) and len(c["arms"]) == 2):
        raise ClaimsError(f"{where}: arms must be a list of two arm names")
    if c["test"] == "equivalence" and not isinstance(c.get("margin"), int | float):
        raise ClaimsError(f"{where}: an equivalence claim needs a numeric 'margin'")
    if c["test"] == "share_sum" and not c.get("reference"):
        raise ClaimsError(f"{where}: a share_sum claim needs 'reference' (the full model)")
    if c.get("group") and c["group"] not in (spec.get("groups") or {}):
        raise ClaimsError(f"{where}: group '{c['group']}' not under groups:")
    a, b = c["arms"]
    opponents = tuple(v for v in (a, b) if any(_matches([v], p) for p in spec["opponents"]))
    return Claim(c["id"], study, c["metric"], a, b, c["test"], c.get("margin"),
                 c.get("reference"), c.get("group"), opponents)  # fmt: skip


# ---- statistics --------------------------------------------------------------------------------


def interval(diffs: list[float], boot: Mapping[str, int]) -> dict[str, Any]:
    """Mean, 95 % t interval, percentile bootstrap (n >= min_seeds) and sign agreement."""
    n = len(diffs)
    out: dict[str, Any] = {"n": n}
    if n == 0:
        return out
    d = np.asarray(diffs, dtype=float)
    mean = float(d.mean())
    out["diff"] = mean
    # an exact zero agrees with nothing: identical arms are not seeds that agree
    out["agree"] = int(np.sum((d != 0) & (np.sign(d) == np.sign(mean))))
    if n < 2:
        return out
    out["identical"] = bool(np.all(d == 0))
    half = ci95(float(d.std(ddof=1)), n)
    assert half is not None  # n >= 2 and a finite std
    out.update(ci_lo=mean - half, ci_hi=mean + half, ci_method="t")
    if n >= boot["min_seeds"]:
        rng = np.random.default_rng(boot["seed"])
        means = d[rng.integers(0, n, size=(boot["resamples"], n))].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        out.update(boot_lo=float(lo), boot_hi=float(hi), ci_method="t+bootstrap")
    return out


def p_value(diffs: list[float], test: str, margin: float | None = None) -> float | None:
    """Two-sided p of the paired t test of mean 0 (``direction``, ``share_sum``), or for
    ``equivalence`` the larger p of the two one-sided tests of mean <= -margin and mean >=
    margin (TOST); None below two seeds. Zero spread: the test is decided by the mean alone."""
    n = len(diffs)
    if n < 2:
        return None
    d = np.asarray(diffs, dtype=float)
    mean, se = float(d.mean()), float(d.std(ddof=1)) / np.sqrt(n)
    if test == "equivalence":
        assert margin is not None
        if se == 0:
            return 0.0 if abs(mean) < margin else 1.0
        lower = stats.t.sf((mean + margin) / se, n - 1)  # H0: mean <= -margin
        upper = stats.t.cdf((mean - margin) / se, n - 1)  # H0: mean >= margin
        return float(max(lower, upper))
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * stats.t.sf(abs(mean) / se, n - 1))


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error): the i-th smallest p times (m - i + 1),
    made monotone, at most 1; in the input's order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def benjamini_hochberg(p: list[float]) -> list[float]:
    """Benjamini-Hochberg's step-up adjustment (false discovery rate): the i-th smallest p times
    m / i, made monotone from the largest down, at most 1; in the input's order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, min(1.0, m * p[i] / (rank + 1)))
        out[i] = running
    return out


def in_family(r: Result) -> bool:
    """Claims the adjustment counts: a p-value, and a verdict that is a test's outcome (not
    identical by construction, not against an opponent that did not train)."""
    return r.p_value is not None and r.verdict not in (IDENTICAL, OPPONENT_UNTRAINED, NOT_RUN)


def adjust(results: list[Result], alpha: float = ALPHA) -> list[Result]:
    """Holm- and Benjamini-Hochberg-adjusted p-values over the family (``in_family``) of every
    study's claims, and whether each holding claim still holds at ``alpha`` after adjustment."""
    family = [r for r in results if in_family(r)]
    ps = [r.p_value for r in family]
    for r, ph, pb in zip(family, holm(ps), benjamini_hochberg(ps), strict=True):  # type: ignore[arg-type]
        r.p_holm, r.p_bh = ph, pb
        r.holds_holm = r.verdict == HOLDS and ph < alpha
        r.holds_bh = r.verdict == HOLDS and pb < alpha
    return results


def _bounds(r: Result) -> list[tuple[float, float]]:
    out = [(r.ci_lo, r.ci_hi)]
    if r.boot_lo is not None:
        out.append((r.boot_lo, r.boot_hi))
    return out  # type: ignore[return-value]


def verdict(r: Result) -> str:
    """The verdict from the intervals: a side is stated only when every interval excludes 0."""
    if r.missing:
        return NOT_RUN
    if r.guard:
        return GUARDS[r.guard]
    if r.n == 0:
        return NO_SEEDS
    if r.untrained:
        return OPPONENT_UNTRAINED
    if r.identical:
        return IDENTICAL
    if r.ci_lo is None:
        return NO_INTERVAL if r.test == "interval" else ONE_SEED
    bounds = _bounds(r)
    if r.test == "equivalence":
        inside = all(-r.margin < lo and hi < r.margin for lo, hi in bounds)  # type: ignore[operator]
        if inside:
            return HOLDS
    below = all(hi < 0 for _, hi in bounds)
    above = all(lo > 0 for lo, _ in bounds)
    if r.test == "share_sum":
        return HOLDS if below or above else INDISTINGUISHABLE
    if not (below or above):
        return INDISTINGUISHABLE
    if r.test == "equivalence":
        return NOT_EQUIVALENT
    a_better = below if r.better == "lower" else above
    return HOLDS if a_better else REVERSED


# ---- evaluation --------------------------------------------------------------------------------


def per_seed(frame: pl.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """{arm: {seed: value}} of one metric from a study's seed rows."""
    out: dict[str, dict[int, float]] = {}
    rows = frame.filter(pl.col("b").is_null() & (pl.col("metric") == metric))
    for r in rows.iter_rows(named=True):
        out.setdefault(r["a"], {})[int(r["seed"])] = float(r["value"])
    return out


def paired_diffs(
    c: Claim, values: Mapping[str, Mapping[int, float]], unigram: float | None
) -> tuple[list[int], list[float]]:
    """Seeds present in every arm and the per-seed difference the claim tests."""
    arms = [c.a, c.b] + ([c.reference] if c.reference else [])
    seeds = sorted(set.intersection(*(set(values.get(v, {})) for v in arms)))
    a, b = values.get(c.a, {}), values.get(c.b, {})
    if c.test != "share_sum":
        return seeds, [a[s] - b[s] for s in seeds]
    if unigram is None:
        raise ClaimsError(f"claim {c.id}: a share_sum claim needs the unigram loss (tokens meta)")
    full = values.get(c.reference, {})  # type: ignore[arg-type]
    return seeds, [
        loss_share(unigram, a[s], full[s]) + loss_share(unigram, b[s], full[s]) - 1 for s in seeds
    ]


def untrained(c: Claim, frame: pl.DataFrame, seeds: list[int] | None) -> str:
    """'<arm>: seeds 0, 2' for each opponent of ``c`` whose ``trained`` record is 0 at one of
    ``seeds`` (None: every seed the frame records for it); '' when every opponent trained. A
    missing record is an error: the study's aggregation must write one per seed of the arm."""
    flags = per_seed(frame, TRAINED_METRIC)
    out = []
    for arm in c.opponents:
        rec = flags.get(arm, {})
        want = sorted(rec) if seeds is None else seeds
        lacking = [s for s in want if s not in rec] if seeds is not None else []
        if lacking or not rec:
            raise ClaimsError(
                f"claim {c.id}: opponent {arm} has no '{TRAINED_METRIC}' record at seeds "
                f"{lacking or 'any'} in the {c.study} frame; the study's aggregation must write a "
                f"seed row (arm {arm}, metric {TRAINED_METRIC}, value 1 or 0) per seed, or drop "
                f"{arm} from opponents: in paper/claims/{c.study}.yaml"
            )
        bad = [s for s in want if rec[s] != 1]
        if bad:
            out.append(f"{arm}: seed{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}")
    return "; ".join(out)


def _interval_row(c: Claim, frame: pl.DataFrame) -> dict[str, Any] | None:
    """The claim's interval row, else a guard row of its arms (``GUARDS``), else None."""
    same = frame.filter((pl.col("a") == c.a) & (pl.col("b") == c.b))
    rows = same.filter(pl.col("metric") == c.metric)
    if not len(rows):
        rows = same.filter(pl.col("metric").is_in(list(GUARDS)))
    return rows.row(0, named=True) if len(rows) else None


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def evaluate(
    claims: list[Claim],
    specs: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, pl.DataFrame],
    unigram: float | None = None,
) -> list[Result]:
    """Every claim against its study's frame (``pillm.paper.claim_frame``), each with its
    sentence; then the multiple-comparison adjustment over all of them (``adjust``)."""

    out = []
    for c in claims:
        spec = specs[c.study]
        r = Result(c.id, c.study, c.metric, c.test, c.a, c.b,
                   spec["metrics"][c.metric]["better"], "", margin=c.margin, group=c.group or "",
                   opponents=", ".join(c.opponents))  # fmt: skip
        frame = frames.get(c.study)
        if frame is None:
            r.missing = f"the {c.study} study"
        elif c.test == "interval":
            row = _interval_row(c, frame)
            if row is None:
                r.missing = f"{c.a} - {c.b}"
            else:
                r.n, r.diff, r.ci_lo, r.ci_hi = row["n"], row["value"], row["lo"], row["hi"]
                r.ci_method = row["method"]
                r.guard = row["metric"] if row["metric"] in GUARDS else ""
                if not (_finite(r.ci_lo) and _finite(r.ci_hi)):  # NaN or null: no interval
                    r.ci_lo = r.ci_hi = None
                if c.opponents:
                    r.untrained = untrained(c, frame, None)
        else:
            values = per_seed(frame, c.metric)
            arms = [c.a, c.b] + ([c.reference] if c.reference else [])
            r.missing = ", ".join(v for v in arms if v not in values)
            if not r.missing:
                seeds, diffs = paired_diffs(c, values, unigram)
                r.seeds = ",".join(map(str, seeds))
                for key, value in interval(diffs, spec["bootstrap"]).items():
                    setattr(r, key, value)
                r.p_value = p_value(diffs, c.test, c.margin)
                if c.opponents and seeds:
                    r.untrained = untrained(c, frame, seeds)
        r.verdict = verdict(r)
        r.sentence = sentence(r, spec)
        out.append(r)
    return adjust(out)
