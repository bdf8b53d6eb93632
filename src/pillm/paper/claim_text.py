"""How a claim reads: its sentence (direction only where the interval allows one), the macros
a section quotes (``\\Claim<Id>``, ``Diff``, ``CI``, ``Agree``, ``P``, ``PHolm``; the family's
counts before and after the multiple-comparison adjustment) and the appendix table of every
claim with its interval and adjusted p-value. Results come from ``pillm.paper.claims.evaluate``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pillm.paper.latex import MISSING, fmt_num, macro_name, tex_escape
from pillm.paper.table import Table
from pillm.paper.verdicts import (
    ALPHA,
    BOOTSTRAP,
    HOLDS,
    IDENTICAL,
    NO_INTERVAL,
    NO_SEEDS,
    NOT_EQUIVALENT,
    NOT_EVALUATED,
    NOT_RUN,
    ONE_SEED,
    OPPONENT_UNTRAINED,
    REVERSED,
    TOO_FEW,
    ClaimsError,
    Result,
)

# ---- rendering ---------------------------------------------------------------------------------


def label(variant: str, spec: Mapping[str, Any] | None = None) -> str:
    """The sentence name of an arm: ``names:`` of the claims file, else the study's table label
    (the claims job adds those to ``names``), else the arm's id, escaped."""
    names = (spec or {}).get("names") or {}
    return names[variant] if variant in names else tex_escape(variant)


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
    """'k/n' seeds whose difference has the mean's sign; none for identical arms (no sign)."""
    return f"{r.agree}/{r.n}" if r.n and r.test != "interval" and not r.identical else MISSING


def fmt_p(p: float | None) -> str:
    """A p-value: two significant digits, '$<$0.001' below that; '--' where there is none."""
    if p is None:
        return MISSING
    return "$<$0.001" if p < 0.001 else f"{p:.2g}" if p < 0.1 else f"{p:.2f}"


def seeds_word(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def evidence(r: Result, spec: Mapping[str, Any]) -> str:
    """'(difference, 95 % CI [lo, hi], k/n seeds)'; for one seed, no interval; for a study's
    own interval, its method and n, or 'no interval' where the study computed none."""
    if r.test == "interval":  # the study's own interval: say how it was made and over how many
        how = tex_escape(r.ci_method)
        ci = "no interval" if r.ci_lo is None else f"95\\,\\% CI {fmt_ci(r, spec)}"
        return f"({fmt_diff(r, spec)}, {ci}, {how}, n = {r.n})"
    if r.ci_lo is None:
        return f"({fmt_diff(r, spec)} at one seed, no interval)"
    return f"({fmt_diff(r, spec)}, 95\\,\\% CI {fmt_ci(r, spec)}, {fmt_agree(r)} seeds)"


def sentence(r: Result, spec: Mapping[str, Any]) -> str:
    """The claim as the paper states it: a direction word only where the verdict has one."""
    a, b = label(r.a, spec), label(r.b, spec)
    noun = spec["metrics"][r.metric]["noun"]
    if r.verdict == NOT_RUN:
        return f"{a} vs.\\ {b} was not run in this build ({tex_escape(r.missing)} not configured)"
    if r.verdict == NO_SEEDS:
        return f"{a} and {b} share no seed in this build"
    if r.verdict == OPPONENT_UNTRAINED:
        who = " and ".join(
            f"{label(arm, spec)} did not train at {seeds}"
            for arm, seeds in (part.split(": ") for part in r.untrained.split("; "))
        )
        return (
            f"{a} vs.\\ {b} is not evaluated: {who} (a gradient-trained opponent whose "
            "training loss did not fall by its declared margin under chance)"
        )
    if r.verdict == IDENTICAL:
        return (
            f"{a} and {b} are identical by construction: the paired difference in {noun} is "
            f"exactly 0 at each of the {seeds_word(r.n)}"
        )
    if r.verdict == TOO_FEW:
        return (
            f"{a} and {b} are not compared in {noun}: too few blocks for a direction "
            f"{evidence(r, spec)}"
        )
    if r.verdict == NOT_EVALUATED:
        return (
            f"{a} and {b} are not compared in {noun}: for each of them it is indistinguishable "
            f"from zero {evidence(r, spec)}"
        )
    if r.verdict == NO_INTERVAL:
        return f"{a} and {b} are not compared in {noun} {evidence(r, spec)}"
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
    ran = [r for r in members if r.verdict not in (NOT_RUN, OPPONENT_UNTRAINED)]
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
        out[f"{name}P"] = fmt_p(r.p_value)
        out[f"{name}PHolm"] = fmt_p(r.p_holm)
        if r.test == "share_sum":  # the sum itself, next to its distance from 100 %
            out[f"{name}Sum"] = MISSING if r.diff is None else fmt_num(100 * (1 + r.diff), 1)
    out["ClaimBootstrapMinSeeds"] = str(
        specs.get("lm", {}).get("bootstrap", BOOTSTRAP)["min_seeds"]
    )
    out |= family_macros(results)
    for spec in specs.values():
        for g in spec.get("groups") or {}:
            members = [r for r in results if r.study == spec["study"]]
            out[macro_name("group", g, prefix="Claim")] = group_sentence(g, members, spec)
    return out


def family_macros(results: list[Result]) -> dict[str, str]:
    """The multiple-comparison counts over every study's claims: how many were tested (the
    family), how many hold unadjusted, after Holm and after Benjamini-Hochberg; how many are
    identical by construction, how many were not evaluated for an untrained opponent, and how
    many the study declined (a guard row: too few blocks, or both arms indistinguishable from 0)."""
    family = [r for r in results if r.p_holm is not None]
    return {
        "ClaimNAll": str(len(results)),
        "ClaimNFamily": str(len(family)),
        "ClaimNHold": str(sum(r.verdict == HOLDS for r in family)),
        "ClaimNHoldHolm": str(sum(bool(r.holds_holm) for r in family)),
        "ClaimNHoldBH": str(sum(bool(r.holds_bh) for r in family)),
        "ClaimNIdentical": str(sum(r.verdict == IDENTICAL for r in results)),
        "ClaimNUntrained": str(sum(r.verdict == OPPONENT_UNTRAINED for r in results)),
        "ClaimNDeclined": str(sum(r.verdict in (TOO_FEW, NOT_EVALUATED) for r in results)),
        "ClaimAlpha": f"{ALPHA:g}",
    }


def breakable(text: str) -> str:
    """An escaped identifier that may break after each underscore in a narrow column (an empty
    discretionary, which the HTML tables drop)."""
    return tex_escape(text).replace("\\_", "\\_\\discretionary{}{}{}")


def table_ci(r: Result, spec: Mapping[str, Any]) -> str:
    """The CI cell: the interval(s); a study's own interval also names how it was made."""
    ci = fmt_ci(r, spec)
    return f"{ci}, {tex_escape(r.ci_method)}" if r.test == "interval" and r.ci_method else ci


def claims_table(results: list[Result], specs: Mapping[str, Mapping[str, Any]]) -> Table:
    rows: list[list[str] | str] = [
        [
            breakable(r.id),
            f"{label(r.a, specs[r.study])} $-$ {label(r.b, specs[r.study])}",
            breakable(r.metric) + (" (share sum)" if r.test == "share_sum" else ""),
            fmt_diff(r, specs[r.study]),
            table_ci(r, specs[r.study]),
            fmt_agree(r),
            fmt_p(r.p_value),
            fmt_p(r.p_holm),
            r.verdict,
        ]
        for r in results
    ]
    return Table(
        caption="Every claim of the paper with its evidence: the mean over seeds of the paired "
        "difference (first arm minus second, the same seed in both; for the share sum, attention's "
        "plus the FFN's loss share minus 100\\,\\%), its 95\\,\\% t interval (and a percentile "
        "bootstrap from "
        f"{specs.get('lm', {}).get('bootstrap', BOOTSTRAP)['min_seeds']} seeds), the seeds whose "
        "non-zero difference agrees with the mean's sign, the p-value of the paired t test "
        "(equivalence: the two one-sided tests against the margin), that p adjusted by Holm's "
        "method over every claim tested here, and the verdict of the intervals (unadjusted); a "
        "claim on an interval the study computed (over blocks or windows) names its method "
        "after the interval and has no $p$. A direction is stated in the text only where every "
        "interval excludes zero. Identical by construction: every paired difference is exactly "
        "0. Opponent did not train: the claim is not evaluated. Too few blocks, not evaluated: "
        "the study declined the comparison (too few blocks per model for a direction, or both "
        "arms' values indistinguishable from zero); its difference is shown, no direction.",
        label="tab:claim-checks",
        page_breaks=True,  # one row per claim: several pages in a paper build
        colspec=COLSPEC,
        header=[
            "Claim",
            "Arms",
            "Metric",
            "Diff.",
            "95\\,\\% CI",
            "Agree",
            "$p$",
            "$p_\\text{Holm}$",
            "Verdict",
        ],
        rows=rows,
        placement="p",
    )


def _wrap(share: str) -> str:
    """A left-aligned wrapping column of ``share`` times the line width; a cell's first word may
    be hyphenated too (\\hspace{0pt}), so one long word ("indistinguishable") fits."""
    return ">{\\raggedright\\arraybackslash\\hspace{0pt}}p{" + share + "\\linewidth}"


# Long cells (ids, arm names, intervals, verdicts) wrap in fixed-width columns, so the table's
# width does not grow with the arm names or the number of intervals.
COLSPEC = (
    "@{}"
    + _wrap("0.15")
    + _wrap("0.18")  # a paper build's right-aligned columns (p, p_Holm) need the space
    + _wrap("0.08")
    + "r"
    + _wrap("0.15")
    + "rrr"
    + _wrap("0.10")
    + "@{}"
)
