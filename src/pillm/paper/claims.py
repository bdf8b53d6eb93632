"""Executable claims: every direction the paper states, evaluated from the summaries.

``paper/claims/<study>.yaml`` declares each study's claims (metric, two arms, a test); each study's
aggregate rule hands over ``summary/claims/<study>.parquet`` (``pillm.paper.claim_frame``).
``evaluate`` pairs the two arms seed by seed (the same seed in both), takes the mean difference
``a - b``, a 95 % t interval over seeds and, from ``bootstrap.min_seeds`` seeds on, a seeded
percentile bootstrap of the mean, and counts the seeds whose difference has the mean's sign; an
``interval`` claim takes the difference and interval the study computed (over blocks, windows).
A direction is stated only where every interval of the record excludes zero; otherwise the
sentence says the arms are indistinguishable at n seeds (one seed gives no interval, and the
sentence says so). An arm or study the build does not run makes the claim "not run", never an
error.

``claims_job`` writes ``summary/claims.parquet`` (one row per claim), the macro file
(``\\Claim<Id>``: the sentence; ``Diff``, ``CI``, ``Agree``: its numbers), the appendix table
and the flip report: it appends each build's verdicts to a history file that is no Snakemake
output (Snakemake would delete it before the job) and reports every claim whose verdict changed
since the last entry, in its log, a ``.tex`` paragraph and a plain text file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from pillm.core.records import write_text
from pillm.lm.sensitivity import loss_share  # (L_uni - L_v) / (L_uni - L_full)
from pillm.paper.claim_frame import read_claim_frame
from pillm.paper.latex import MISSING, fmt_num, macro_name, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import ci95, write_parquet
from pillm.plan import VARIANTS

TESTS = ("direction", "equivalence", "share_sum", "interval")
BOOTSTRAP = {"min_seeds": 5, "resamples": 10000, "seed": 0}  # a file's bootstrap: overrides these

# Verdicts (the ``verdict`` field); the sentence and the table render from these.
HOLDS = "holds"  # the direction (or equivalence, or non-additivity) the claim declares
REVERSED = "reversed"  # the interval excludes zero on the other side
INDISTINGUISHABLE = "indistinguishable"
NOT_EQUIVALENT = "not equivalent"  # equivalence: the interval leaves the margin
ONE_SEED = "no interval (1 seed)"
NO_SEEDS = "no common seeds"
NOT_RUN = "not run"


class ClaimsError(ValueError):
    """A malformed claims file: the message names the claim and key."""


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


@dataclass
class Result:
    """One evaluated claim: every field goes to ``claims.parquet``."""

    id: str
    study: str
    metric: str
    test: str
    a: str
    b: str
    better: str
    verdict: str
    n: int = 0
    seeds: str = ""
    diff: float | None = None  # mean over seeds of a - b (share_sum: share_a + share_b - 1)
    ci_lo: float | None = None  # 95 % t interval over seeds
    ci_hi: float | None = None
    boot_lo: float | None = None  # percentile bootstrap (n >= bootstrap.min_seeds), else null
    boot_hi: float | None = None
    ci_method: str = ""  # which intervals decided the verdict: "t", "t+bootstrap" or ""
    agree: int = 0  # seeds whose difference has the mean's sign
    margin: float | None = None
    missing: str = ""  # arms the config does not run
    group: str = ""
    sentence: str = ""


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
    return claims, specs


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
    return Claim(c["id"], study, c["metric"], a, b, c["test"], c.get("margin"),
                 c.get("reference"), c.get("group"))  # fmt: skip


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
    out["agree"] = int(np.sum(np.sign(d) == np.sign(mean)))
    if n < 2:
        return out
    half = ci95(float(d.std(ddof=1)), n)
    assert half is not None  # n >= 2 and a finite std
    out.update(ci_lo=mean - half, ci_hi=mean + half, ci_method="t")
    if n >= boot["min_seeds"]:
        rng = np.random.default_rng(boot["seed"])
        means = d[rng.integers(0, n, size=(boot["resamples"], n))].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        out.update(boot_lo=float(lo), boot_hi=float(hi), ci_method="t+bootstrap")
    return out


def _bounds(r: Result) -> list[tuple[float, float]]:
    out = [(r.ci_lo, r.ci_hi)]
    if r.boot_lo is not None:
        out.append((r.boot_lo, r.boot_hi))
    return out  # type: ignore[return-value]


def verdict(r: Result) -> str:
    """The verdict from the intervals: a side is stated only when every interval excludes 0."""
    if r.missing:
        return NOT_RUN
    if r.n == 0:
        return NO_SEEDS
    if r.ci_lo is None:
        return ONE_SEED
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


def _interval_row(c: Claim, frame: pl.DataFrame) -> dict[str, Any] | None:
    rows = frame.filter(
        (pl.col("a") == c.a) & (pl.col("b") == c.b) & (pl.col("metric") == c.metric)
    )
    return rows.row(0, named=True) if len(rows) else None


def evaluate(
    claims: list[Claim],
    specs: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, pl.DataFrame],
    unigram: float | None = None,
) -> list[Result]:
    """Every claim against its study's frame (``pillm.paper.claim_frame``)."""
    out = []
    for c in claims:
        spec = specs[c.study]
        r = Result(c.id, c.study, c.metric, c.test, c.a, c.b,
                   spec["metrics"][c.metric]["better"], "", margin=c.margin, group=c.group or "")  # fmt: skip
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
        else:
            values = per_seed(frame, c.metric)
            arms = [c.a, c.b] + ([c.reference] if c.reference else [])
            r.missing = ", ".join(v for v in arms if v not in values)
            if not r.missing:
                seeds, diffs = paired_diffs(c, values, unigram)
                r.seeds = ",".join(map(str, seeds))
                for key, value in interval(diffs, spec["bootstrap"]).items():
                    setattr(r, key, value)
        r.verdict = verdict(r)
        r.sentence = sentence(r, spec)
        out.append(r)
    return out


# ---- rendering ---------------------------------------------------------------------------------


def label(variant: str, spec: Mapping[str, Any] | None = None) -> str:
    """The sentence name of a variant (``names:`` of the claims file), else its table label."""
    names = (spec or {}).get("names") or {}
    if variant in names:
        return names[variant]
    lm = (spec or {}).get("study", "lm") == "lm"
    return VARIANTS[variant].label if lm and variant in VARIANTS else tex_escape(variant)


def _digits(r: Result, spec: Mapping[str, Any]) -> int:
    return 1 if r.test == "share_sum" else spec["metrics"][r.metric]["digits"]


def _scale(r: Result) -> float:
    return 100.0 if r.test == "share_sum" else 1.0  # shares in percent


def fmt_diff(r: Result, spec: Mapping[str, Any]) -> str:
    if r.diff is None:
        return MISSING
    return fmt_num(r.diff * _scale(r), _digits(r, spec)) + (
        "\\,\\%" if r.test == "share_sum" else ""
    )


def fmt_ci(r: Result, spec: Mapping[str, Any]) -> str:
    if r.ci_lo is None:
        return MISSING
    k, d = _scale(r), _digits(r, spec)
    text = f"[{fmt_num(r.ci_lo * k, d)}, {fmt_num(r.ci_hi * k, d)}]"  # type: ignore[operator]
    if r.boot_lo is not None:
        text += f", bootstrap [{fmt_num(r.boot_lo * k, d)}, {fmt_num(r.boot_hi * k, d)}]"  # type: ignore[operator]
    return text


def fmt_agree(r: Result) -> str:
    return f"{r.agree}/{r.n}" if r.n and r.test != "interval" else MISSING


def seeds_word(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def evidence(r: Result, spec: Mapping[str, Any]) -> str:
    """'(difference, 95 % CI [lo, hi], k/n seeds)'; for one seed, no interval."""
    if r.ci_lo is None:
        return f"({fmt_diff(r, spec)} at one seed, no interval)"
    if r.test == "interval":  # the study's own interval: say how it was made and over how many
        how = tex_escape(r.ci_method)
        return f"({fmt_diff(r, spec)}, 95\\,\\% CI {fmt_ci(r, spec)}, {how}, n = {r.n})"
    return f"({fmt_diff(r, spec)}, 95\\,\\% CI {fmt_ci(r, spec)}, {fmt_agree(r)} seeds)"


def sentence(r: Result, spec: Mapping[str, Any]) -> str:
    """The claim as the paper states it: a direction word only where the verdict has one."""
    a, b = label(r.a, spec), label(r.b, spec)
    noun = spec["metrics"][r.metric]["noun"]
    if r.verdict == NOT_RUN:
        return f"{a} vs.\\ {b} was not run in this build ({tex_escape(r.missing)} not configured)"
    if r.verdict == NO_SEEDS:
        return f"{a} and {b} share no seed in this build"
    if r.test == "interval" and r.verdict in (HOLDS, REVERSED):
        higher = (r.diff or 0) > 0
        return (
            f"{noun} is {'higher' if higher else 'lower'} for {a} than for {b} {evidence(r, spec)}"
        )
    if r.test == "interval":
        return f"{a} and {b} are indistinguishable in {noun} {evidence(r, spec)}"
    if r.test == "share_sum":
        what = f"the loss shares of {a} and {b}"
        if r.verdict == HOLDS:
            total = fmt_num(100 * (1 + r.diff), 1)  # type: ignore[operator]
            return (
                f"{what} sum to {total}\\,\\%, so they are not additive "
                f"(the sum minus 100\\,\\%: {evidence(r, spec)[1:-1]})"
            )
        if r.verdict == ONE_SEED:
            return f"whether {what} add up to 100\\,\\% is not decided {evidence(r, spec)}"
        return (
            f"{what} are indistinguishable from additive at {seeds_word(r.n)} {evidence(r, spec)}"
        )
    if r.verdict == ONE_SEED:
        return f"{a} and {b} cannot be compared without a second seed {evidence(r, spec)}"
    if r.test == "equivalence" and r.verdict == HOLDS:
        margin = fmt_num(r.margin, _digits(r, spec))
        return f"{a} and {b} are equivalent within $\\pm${margin} in {noun} {evidence(r, spec)}"
    if r.verdict in (HOLDS, REVERSED, NOT_EQUIVALENT):
        lower = (r.diff or 0) < 0  # a's value is lower than b's
        return f"{a} reaches a {'lower' if lower else 'higher'} {noun} than {b} {evidence(r, spec)}"
    return f"{a} and {b} are indistinguishable in {noun} at {seeds_word(r.n)} {evidence(r, spec)}"


def group_sentence(name: str, results: list[Result], spec: Mapping[str, Any]) -> str:
    """'k of the m <what> reach a lower <noun> than <b> (labels)' over a group's claims that ran."""
    members = [r for r in results if r.group == name]
    if len({(r.metric, r.b) for r in members}) > 1:
        raise ClaimsError(f"group '{name}': its claims need one metric and one second arm")
    ran = [r for r in members if r.verdict != NOT_RUN]
    what = spec["groups"][name]["what"]
    if not ran:
        return f"none of the {what} was run in this build"
    r0 = ran[0]
    better = spec["metrics"][r0.metric]["better"]
    holds = [label(r.a, spec) for r in ran if r.verdict == HOLDS]
    n = max(r.n for r in ran)
    text = (
        f"{len(holds)} of the {len(ran)} {what} reach a {better} "
        f"{spec['metrics'][r0.metric]['noun']} than {label(r0.b, spec)} with a 95\\,\\% interval "
        f"over seeds that excludes zero at {seeds_word(n)}"
    )
    if holds:
        text += f" ({', '.join(holds)})"
    if n < 2:
        text += "; one seed gives no interval"
    return text


def claim_macros(results: list[Result], specs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in results:
        spec = specs[r.study]
        name = macro_name(r.id, prefix="Claim")
        out[name] = r.sentence
        out[f"{name}Diff"] = fmt_diff(r, spec)
        out[f"{name}CI"] = fmt_ci(r, spec)
        out[f"{name}Agree"] = fmt_agree(r)
        out[f"{name}Verdict"] = r.verdict
        if r.test == "share_sum":  # the sum itself, next to its distance from 100 %
            out[f"{name}Sum"] = MISSING if r.diff is None else fmt_num(100 * (1 + r.diff), 1)
    out["ClaimBootstrapMinSeeds"] = str(
        specs.get("lm", {}).get("bootstrap", BOOTSTRAP)["min_seeds"]
    )
    for spec in specs.values():
        for g in spec.get("groups") or {}:
            members = [r for r in results if r.study == spec["study"]]
            out[macro_name("group", g, prefix="Claim")] = group_sentence(g, members, spec)
    return out


def claims_table(results: list[Result], specs: Mapping[str, Mapping[str, Any]]) -> Table:
    rows: list[list[str] | str] = [
        [
            tex_escape(r.id),
            f"{label(r.a, specs[r.study])} $-$ {label(r.b, specs[r.study])}",
            tex_escape(r.metric) + (" (share sum)" if r.test == "share_sum" else ""),
            fmt_diff(r, specs[r.study]),
            fmt_ci(r, specs[r.study]),
            fmt_agree(r),
            r.ci_method or MISSING,
            r.verdict,
        ]
        for r in results
    ]
    return Table(
        caption="Every claim of the paper with its evidence: the mean over seeds of the paired "
        "difference (first arm minus second, the same seed in both; for the share sum, attention's "
        "plus the FFN's loss share minus 100\\,\\%), its 95\\,\\% t interval (and a percentile "
        "bootstrap from "
        f"{specs.get('lm', {}).get('bootstrap', BOOTSTRAP)['min_seeds']} seeds), the seeds that agree with the mean's sign and "
        "the verdict; a claim on an interval the study computed (over blocks or windows) names its "
        "method in the CI column. A direction is stated in the text only where every interval "
        "excludes zero.",
        label="tab:claim-checks",
        colspec="lllrlrll",
        header=["Claim", "Arms", "Metric", "Diff.", "95\\,\\% CI", "Agree", "CI", "Verdict"],
        rows=rows,
        placement="p",
    )


# ---- history and flips -------------------------------------------------------------------------


def snapshot(results: list[Result]) -> dict[str, dict[str, Any]]:
    return {r.id: {"verdict": r.verdict, "ci": [r.ci_lo, r.ci_hi], "n": r.n} for r in results}


def last_entry(history: Path) -> dict[str, Any] | None:
    if not history.exists():
        return None
    lines = [ln for ln in history.read_text().splitlines() if ln.strip()]
    return json.loads(lines[-1]) if lines else None


def _fmt_plain_ci(ci: list[float | None]) -> str:
    lo, hi = ci
    return "[no interval]" if lo is None else f"[{lo:.4g}, {hi:.4g}]"


def flips(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """'claim <id> flipped: <old verdict> [old CI] -> <new verdict> [new CI]' per changed claim."""
    if not old:
        return []
    out = []
    for cid, now in new.items():
        was = old.get(cid)
        if was is not None and was["verdict"] != now["verdict"]:
            out.append(
                f"claim {cid} flipped: {was['verdict']} {_fmt_plain_ci(was['ci'])} -> "
                f"{now['verdict']} {_fmt_plain_ci(now['ci'])}"
            )
    return out


def flips_tex(lines: list[str], had_history: bool) -> str:
    head = "% Generated by pillm.paper.claims. Do not edit.\n"
    if not had_history:
        return (
            head + "This is the first build with a claims history; no verdict can have flipped.\n"
        )
    if not lines:
        return head + "No claim changed its verdict since the previous build.\n"
    arrow = " $\\to$ "
    items = "".join(f"  \\item {tex_escape(ln).replace(' -> ', arrow)}\n" for ln in lines)
    return (
        head
        + "Claims whose verdict changed since the previous build:\n\\begin{itemize}\n"
        + items
        + "\\end{itemize}\n"
    )


def claims_job(
    frames: list[str],
    tokens_meta: str,
    claims: list[str],
    params: dict,
    templates: str,
    out: str,
    table: str,
    numbers: str,
    flips_tex_path: str,
    flips_txt_path: str,
    history: str,
) -> None:
    """Evaluate the claims files ``claims`` (``paper/claims/<study>.yaml``) against the studies'
    frames ``frames`` (``summary/claims/<study>.parquet``); write the claims parquet ``out``, the
    macros, the appendix table and the flip report. ``params``: {"name": the config's name}.
    """
    declared, specs = load_claims(claims)
    by_study = {Path(p).stem: read_claim_frame(p) for p in frames}
    unigram = json.loads(Path(tokens_meta).read_text()).get("unigram_test_loss")
    results = evaluate(declared, specs, by_study, unigram)
    for r in results:
        print(f"claim {r.id}: {r.verdict} (n={r.n}, diff={r.diff}, ci=[{r.ci_lo}, {r.ci_hi}])")
    write_parquet(pl.DataFrame([asdict(r) for r in results], infer_schema_length=None), out)
    render_report({table: claims_table(results, specs)}, claim_macros(results, specs), templates,
                  numbers, "pillm.paper.claims from paper/claims/", prefix="Claim")  # fmt: skip
    hist = Path(history)
    prev = last_entry(hist)
    new = snapshot(results)
    lines = flips(prev["claims"] if prev else None, new)
    for ln in lines:
        print(ln)
    write_text(flips_tex_path, flips_tex(lines, prev is not None))
    write_text(flips_txt_path, "".join(ln + "\n" for ln in lines) or "no claim flipped\n")
    hist.parent.mkdir(parents=True, exist_ok=True)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "config": params["name"],
             "claims": new}  # fmt: skip
    with hist.open("a") as f:  # append-only: the record of every build's verdicts
        f.write(json.dumps(entry, sort_keys=True) + "\n")
