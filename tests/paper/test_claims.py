"""Executable claims (pillm.paper.claims) on synthetic LM summaries, and a scan of the paper's
sections for direction words typed outside a claim macro."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl
import pytest
import yaml

from pillm.paper import claim_report as report
from pillm.paper import claim_text as text
from pillm.paper import claims as cl
from pillm.paper import verdicts as v
from pillm.paper.claim_frame import claim_frame

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "paper" / "templates"

SPEC = {
    "bootstrap": {"min_seeds": 5, "resamples": 2000, "seed": 0},
    "metrics": {
        "test_ppl": {"noun": "test perplexity", "better": "lower", "digits": 1},
        "test_loss": {"noun": "test loss", "better": "lower", "digits": 4},
        "test_acc": {"noun": "next-token accuracy", "better": "higher", "digits": 4},
    },
    "claims": [
        {"id": "ffn_vs_attn", "study": "lm", "metric": "test_ppl",
         "arms": ["ffn_only", "attn_only"], "test": "direction"},
        {"id": "acc", "study": "lm", "metric": "test_acc",
         "arms": ["ffn_only", "attn_only"], "test": "direction"},
        {"id": "same", "study": "lm", "metric": "test_ppl", "arms": ["refit", "refit_single8d"],
         "test": "equivalence", "margin": 1.0},
        {"id": "shares", "study": "lm", "metric": "test_loss", "arms": ["attn_only", "ffn_only"],
         "reference": "baseline", "test": "share_sum"},
        {"id": "control", "study": "lm", "metric": "test_ppl",
         "arms": ["frozen_ffn_attn", "attn_only"], "test": "direction", "group": "g"},
        {"id": "pil_first", "study": "lm", "metric": "test_ppl",
         "arms": ["pil_then_attn", "attn_only"], "test": "direction", "group": "g"},
    ],
    "groups": {"g": {"what": "things"}},
    "names": {"ffn_only": "FFN-only", "attn_only": "attention-only"},
}  # fmt: skip


def runs(values: dict[tuple[str, str], list[float | None]]) -> pl.DataFrame:
    """The LM study's claim frame: {(variant, metric): [value per seed 0, 1, ...]} (None: no run)."""
    rows = [
        {"arm": v, "metric": m, "seed": s, "value": x}
        for (v, m), xs in values.items()
        for s, x in enumerate(xs)
        if x is not None
    ]
    return claim_frame(rows)


def claims_file(tmp_path: Path, spec: dict = SPEC) -> Path:
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def evaluate(tmp_path: Path, values: dict, unigram: float | None = 6.0) -> dict[str, cl.Result]:
    claims, specs = cl.load_claims([claims_file(tmp_path)])
    return {r.id: r for r in cl.evaluate(claims, specs, {"lm": runs(values)}, unigram)}


def test_claim_holds_with_interval_and_sentence(tmp_path):
    res = evaluate(tmp_path, {("ffn_only", "test_ppl"): [228.0, 230.0, 226.5],
                              ("attn_only", "test_ppl"): [260.0, 262.5, 257.0]})  # fmt: skip
    r = res["ffn_vs_attn"]
    diffs = [-32.0, -32.5, -30.5]
    assert r.verdict == cl.HOLDS and r.n == 3 and r.agree == 3 and r.ci_method == "t"
    assert r.diff == pytest.approx(sum(diffs) / 3)
    half = 4.302652729911275 * pl.Series(diffs).std() / math.sqrt(3)  # t_{0.975, 2}
    assert (r.ci_lo, r.ci_hi) == pytest.approx((r.diff - half, r.diff + half))
    assert r.boot_lo is None  # fewer seeds than bootstrap.min_seeds
    assert r.sentence.startswith("FFN-only reaches a lower test perplexity than attention-only (")
    assert "3/3 seeds" in r.sentence and "95\\,\\% CI [\\ensuremath{-}" in r.sentence


def test_reversed_direction_is_stated_the_other_way(tmp_path):
    res = evaluate(tmp_path, {("ffn_only", "test_ppl"): [300.0, 310.0, 305.0],
                              ("attn_only", "test_ppl"): [260.0, 262.5, 257.0]})  # fmt: skip
    r = res["ffn_vs_attn"]
    assert r.verdict == cl.REVERSED
    assert r.sentence.startswith("FFN-only reaches a higher test perplexity than attention-only")


def test_higher_is_better_metric(tmp_path):
    res = evaluate(tmp_path, {("ffn_only", "test_acc"): [0.30, 0.31, 0.32],
                              ("attn_only", "test_acc"): [0.20, 0.22, 0.21]})  # fmt: skip
    assert res["acc"].verdict == cl.HOLDS
    assert "higher next-token accuracy" in res["acc"].sentence


def test_within_noise_is_indistinguishable_without_a_direction_word(tmp_path):
    res = evaluate(tmp_path, {("ffn_only", "test_ppl"): [228.0, 262.0, 240.0],
                              ("attn_only", "test_ppl"): [260.0, 230.0, 241.0]})  # fmt: skip
    r = res["ffn_vs_attn"]
    assert r.verdict == cl.INDISTINGUISHABLE
    assert r.ci_lo < 0 < r.ci_hi
    assert "indistinguishable in test perplexity at 3 seeds" in r.sentence
    assert not re.search(r"\b(lower|higher)\b", r.sentence)


def test_one_seed_gives_no_interval_and_says_so(tmp_path):
    res = evaluate(
        tmp_path, {("ffn_only", "test_ppl"): [228.0], ("attn_only", "test_ppl"): [260.0]}
    )
    r = res["ffn_vs_attn"]
    assert r.verdict == cl.ONE_SEED and r.n == 1 and r.ci_lo is None and r.ci_method == ""
    assert "no interval" in r.sentence and not re.search(r"\b(lower|higher)\b", r.sentence)


def test_only_common_seeds_are_paired(tmp_path):
    values = {("ffn_only", "test_ppl"): [228.0, 230.0, 226.5],
              ("attn_only", "test_ppl"): [260.0, 262.5]}  # fmt: skip
    r = evaluate(tmp_path, values)["ffn_vs_attn"]
    assert r.n == 2 and r.seeds == "0,1"


def test_bootstrap_from_min_seeds_must_agree_too(tmp_path):
    values = {("ffn_only", "test_ppl"): [228.0, 230.0, 226.5, 229.0, 231.0],
              ("attn_only", "test_ppl"): [260.0, 262.5, 257.0, 259.0, 261.0]}  # fmt: skip
    r = evaluate(tmp_path, values)["ffn_vs_attn"]
    assert r.ci_method == "t+bootstrap" and r.boot_lo <= r.diff <= r.boot_hi
    assert r.verdict == cl.HOLDS and "bootstrap [" in text.fmt_ci(r, SPEC)
    again = evaluate(tmp_path, values)["ffn_vs_attn"]  # seeded: the same interval every build
    assert (again.boot_lo, again.boot_hi) == (r.boot_lo, r.boot_hi)
    # the t interval excludes zero but the bootstrap does not: no direction is stated
    r.boot_lo, r.boot_hi = -1.0, 1.0
    assert cl.verdict(r) == cl.INDISTINGUISHABLE


def test_arm_not_run_is_reported_not_dropped(tmp_path):
    res = evaluate(tmp_path, {("pil_then_attn", "test_ppl"): [250.0, 251.0, 249.0],
                              ("attn_only", "test_ppl"): [260.0, 262.5, 257.0]})  # fmt: skip
    r = res["control"]
    assert r.verdict == cl.NOT_RUN and r.missing == "frozen_ffn_attn"
    assert "not run in this build" in r.sentence
    group = text.group_sentence("g", list(res.values()), dict(SPEC, study="lm"))
    assert group.startswith("1 of the 1 things reach a lower test perplexity than attention-only")


def test_arms_without_a_common_seed_are_not_paired(tmp_path):
    r = evaluate(tmp_path, {("ffn_only", "test_ppl"): [228.0],
                            ("attn_only", "test_ppl"): [None, 260.0]})["ffn_vs_attn"]  # fmt: skip
    assert r.verdict == cl.NO_SEEDS and r.n == 0


def test_interval_claim_reads_the_study_interval_and_names_its_method(tmp_path):
    spec = {"metrics": {"rho": {"noun": "Spearman correlation with the swap cost",
                                "better": "higher", "digits": 2}},
            "names": {"masked": "masked R\\textsuperscript{2}"},
            "claims": [{"id": "probe_masked", "metric": "rho", "arms": ["masked", "pooled"],
                        "test": "interval"},
                       {"id": "probe_other", "metric": "rho", "arms": ["x", "pooled"],
                        "test": "interval"}]}  # fmt: skip
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(spec))
    claims, specs = cl.load_claims([path, claims_file(tmp_path)])
    assert {c.study for c in claims} == {"probe", "lm"}
    row = {"a": "masked", "b": "pooled", "metric": "rho", "diff": 0.3, "lo": 0.1, "hi": 0.5,
           "n": 12, "method": "bootstrap over blocks"}  # fmt: skip
    frames = {"probe": claim_frame(interval_rows=[row])}
    res = {r.id: r for r in cl.evaluate(claims, specs, frames)}
    r = res["probe_masked"]
    assert r.verdict == cl.HOLDS and (r.ci_lo, r.ci_hi) == (0.1, 0.5) and r.n == 12
    assert "bootstrap over blocks" in r.sentence and "n = 12" in r.sentence
    assert r.sentence.startswith("Spearman correlation with the swap cost is higher for masked")
    assert res["probe_other"].verdict == cl.NOT_RUN  # no interval row for x - pooled
    assert res["ffn_vs_attn"].verdict == cl.NOT_RUN  # no lm frame in this build
    row_noise = dict(row, lo=-0.1)
    r = cl.evaluate(claims, specs, {"probe": claim_frame(interval_rows=[row_noise])})[0]
    assert r.verdict == cl.INDISTINGUISHABLE and "indistinguishable" in r.sentence


PROBE_SPEC = {"metrics": {"rho": {"noun": "Spearman correlation with the swap cost",
                                  "better": "lower", "digits": 2}},
              "names": {"masked": "kept-row R\\textsuperscript{2}"},
              "claims": [{"id": "probe_masked", "metric": "rho", "arms": ["masked", "all"],
                          "test": "interval"}]}  # fmt: skip


def evaluate_probe(tmp_path: Path, **row: object) -> cl.Result:
    """The one interval claim of ``PROBE_SPEC`` against a frame of one row (masked - all)."""
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(PROBE_SPEC))
    claims, specs = cl.load_claims([path])
    base = {"a": "masked", "b": "all", "metric": "rho", "diff": -0.3, "lo": -0.5, "hi": -0.1,
            "n": 4, "method": "bootstrap over blocks; probe.min_blocks = 10"}  # fmt: skip
    return cl.evaluate(claims, specs, {"probe": claim_frame(interval_rows=[{**base, **row}])})[0]


@pytest.mark.parametrize("nan", [False, True], ids=["with-interval", "without-interval"])
def test_guard_row_too_few_blocks_gives_its_verdict_and_no_direction(tmp_path, nan):
    """A study's guard row (``too_few_blocks``) in place of the claim's row: the verdict says
    why no direction is stated, the sentence quotes the difference as evidence."""
    lo_hi = {"lo": math.nan, "hi": math.nan} if nan else {}
    r = evaluate_probe(tmp_path, metric=v.TOO_FEW_METRIC, **lo_hi)
    assert r.verdict == v.TOO_FEW == "too few blocks" and r.guard == v.TOO_FEW_METRIC
    assert r.sentence.startswith("kept-row R\\textsuperscript{2} and all are not compared in "
                                 "Spearman correlation with the swap cost: too few blocks for a "
                                 "direction (")  # fmt: skip
    assert "probe.min\\_blocks = 10, n = 4)" in r.sentence and "\\ensuremath{-}0.30" in r.sentence
    assert ("no interval" in r.sentence) == nan and (
        "[\\ensuremath{-}0.50, \\ensuremath{-}0.10]" in r.sentence
    ) != nan
    assert typed_directions(r.sentence) == []
    macros = text.claim_macros([r], {"probe": {**PROBE_SPEC, "study": "probe"}})
    assert macros["ClaimProbeMaskedVerdict"] == "too few blocks"
    assert macros["ClaimProbeMasked"] == r.sentence


def test_guard_row_both_null_is_not_evaluated(tmp_path):
    r = evaluate_probe(tmp_path, metric=v.BOTH_NULL_METRIC, n=40)
    assert r.verdict == v.NOT_EVALUATED and r.p_value is None and r.p_holm is None
    assert (
        "are not compared in Spearman correlation with the swap cost: for each of them it is "
        "indistinguishable from zero (\\ensuremath{-}0.30, 95\\,\\% CI [\\ensuremath{-}0.50, \\ensuremath{-}0.10]"
        in r.sentence
    )
    assert typed_directions(r.sentence) == []


def test_interval_row_without_an_interval_says_no_interval(tmp_path):
    """The claim's own row with no interval (NaN bounds): no direction and no 'one seed'."""
    r = evaluate_probe(tmp_path, lo=math.nan, hi=math.nan)
    assert r.verdict == v.NO_INTERVAL and r.ci_lo is None and r.ci_hi is None and not r.guard
    assert r.sentence.endswith("(\\ensuremath{-}0.30, no interval, bootstrap over blocks; "
                               "probe.min\\_blocks = 10, n = 4)")  # fmt: skip
    assert "seed" not in r.sentence and typed_directions(r.sentence) == []
    row = text.claims_table([r], {"probe": PROBE_SPEC}).rows[0]
    assert row[4].startswith("--, bootstrap over blocks") and row[8] == "no interval"


def test_declared_probe_claims_read_the_guard_rows(tmp_path):
    """paper/claims/probe.yaml against the guard rows pillm.probe.correlations writes."""
    claims, specs = cl.load_claims([ROOT / "paper" / "claims" / "probe.yaml"])
    rows = [
        {"a": "pillm_masked", "b": "pillm_all", "metric": v.TOO_FEW_METRIC, "diff": 0.1,
         "lo": math.nan, "hi": math.nan, "n": 4, "method": "hierarchical bootstrap"},
        {"a": "minilm_masked", "b": "minilm_all", "metric": v.BOTH_NULL_METRIC, "diff": 0.05,
         "lo": -0.2, "hi": 0.3, "n": 12, "method": "bootstrap over blocks"},
    ]  # fmt: skip
    res = {r.id: r for r in cl.evaluate(claims, specs, {"probe": claim_frame(interval_rows=rows)})}
    assert res["probe_pillm_masked_vs_all_swap"].verdict == v.TOO_FEW
    assert res["probe_minilm_masked_vs_all_swap"].verdict == v.NOT_EVALUATED
    assert res["probe_smollm2_masked_vs_all_swap"].verdict == cl.NOT_RUN
    for r in res.values():
        assert typed_directions(r.sentence) == [], r.sentence
    assert text.claim_macros(list(res.values()), specs)["ClaimNDeclined"] == "2"


def test_claim_ids_are_unique_across_study_files(tmp_path):
    other = tmp_path / "gen.yaml"
    first = {k: v for k, v in SPEC["claims"][0].items() if k != "study"}
    other.write_text(yaml.safe_dump(dict(SPEC, claims=[first])))
    with pytest.raises(cl.ClaimsError, match="also declared in"):
        cl.load_claims([claims_file(tmp_path), other])


def test_equivalence_inside_and_outside_the_margin(tmp_path):
    close = {
        ("refit", "test_ppl"): [100.0, 100.2, 99.9],
        ("refit_single8d", "test_ppl"): [100.1, 100.0, 100.0],
    }
    r = evaluate(tmp_path, close)["same"]
    assert r.verdict == cl.HOLDS and "equivalent within $\\pm$1.0" in r.sentence
    apart = {
        ("refit", "test_ppl"): [103.0, 103.2, 102.9],
        ("refit_single8d", "test_ppl"): [100.1, 100.0, 100.0],
    }
    assert evaluate(tmp_path, apart)["same"].verdict == cl.NOT_EQUIVALENT
    wide = {
        ("refit", "test_ppl"): [98.0, 103.0, 100.0],
        ("refit_single8d", "test_ppl"): [100.1, 100.0, 100.0],
    }
    assert evaluate(tmp_path, wide)["same"].verdict == cl.INDISTINGUISHABLE


def test_share_sum_per_seed(tmp_path):
    values = {("baseline", "test_loss"): [5.0, 5.1, 5.05],
              ("attn_only", "test_loss"): [5.2, 5.3, 5.25],
              ("ffn_only", "test_loss"): [5.1, 5.2, 5.12]}  # fmt: skip
    r = evaluate(tmp_path, values, unigram=6.0)["shares"]
    sums = [
        (6 - a) / (6 - f) + (6 - b) / (6 - f) - 1
        for f, a, b in zip([5.0, 5.1, 5.05], [5.2, 5.3, 5.25], [5.1, 5.2, 5.12], strict=True)
    ]
    assert r.diff == pytest.approx(sum(sums) / 3) and r.verdict == cl.HOLDS
    assert "not additive" in r.sentence
    macros = text.claim_macros([r], {"lm": dict(SPEC, study="lm")})
    assert macros["ClaimSharesSum"] == text.fmt_num(100 * (1 + r.diff), 1)
    with pytest.raises(cl.ClaimsError, match="unigram"):
        evaluate(tmp_path, values, unigram=None)


def test_bad_claims_file_names_the_claim_and_key(tmp_path):
    spec = dict(SPEC, claims=[{"id": "x", "study": "lm", "metric": "test_bpb",
                               "arms": ["a", "b"], "test": "direction"}])  # fmt: skip
    with pytest.raises(cl.ClaimsError, match=r"claims\[0\] \(x\): metric 'test_bpb'"):
        cl.load_claims([claims_file(tmp_path, spec)])
    spec = dict(SPEC, claims=[{"id": "x", "study": "lm", "metric": "test_ppl",
                               "arms": ["a", "b"], "test": "equivalence"}])  # fmt: skip
    with pytest.raises(cl.ClaimsError, match="margin"):
        cl.load_claims([claims_file(tmp_path, spec)])


def job(tmp_path: Path, values: dict, build: str) -> tuple[Path, str]:
    """One claims job into tmp_path/<build>, sharing one history file; returns (dir, flips)."""
    out = tmp_path / build
    out.mkdir()
    (out / "frames").mkdir()
    runs(values).write_parquet(out / "frames" / "lm.parquet")
    (out / "meta.json").write_text(json.dumps({"unigram_test_loss": 6.0}))
    report.claims_job(
        [str(out / "frames" / "lm.parquet")], str(out / "meta.json"), [str(claims_file(tmp_path))],
        {"name": "t"}, str(TEMPLATES), str(out / "claims.parquet"),
        str(out / "claims.tex"), str(out / "claims_numbers.tex"), str(out / "flips.tex"),
        str(out / "flips.txt"), str(tmp_path / "history" / "claims.jsonl"),
    )  # fmt: skip
    return out, (out / "flips.txt").read_text()


def test_job_outputs_and_flip_between_builds(tmp_path, capsys):
    holds = {("ffn_only", "test_ppl"): [228.0, 230.0, 226.5],
             ("attn_only", "test_ppl"): [260.0, 262.5, 257.0]}  # fmt: skip
    noise = {("ffn_only", "test_ppl"): [228.0, 262.0, 240.0],
             ("attn_only", "test_ppl"): [260.0, 230.0, 241.0]}  # fmt: skip
    first, text = job(tmp_path, holds, "one")
    assert text == "no claim flipped\n"
    assert "first build with a claims history" in (first / "flips.tex").read_text()
    df = pl.read_parquet(first / "claims.parquet")
    assert df.height == len(SPEC["claims"]) and {"verdict", "ci_lo", "agree", "ci_method"} <= set(
        df.columns
    )
    numbers = (first / "claims_numbers.tex").read_text()
    for name in ("ClaimFfnVsAttn", "ClaimFfnVsAttnDiff", "ClaimFfnVsAttnCI", "ClaimFfnVsAttnAgree",
                 "ClaimGroupG"):  # fmt: skip
        assert f"\\newcommand{{\\{name}}}" in numbers
    table = (first / "claims.tex").read_text()
    assert "tab:claim-checks" in table and "ffn\\_\\discretionary{}{}{}vs" in table
    assert "$p_\\text{Holm}$" in table

    _, same = job(tmp_path, holds, "two")
    assert same == "no claim flipped\n"
    capsys.readouterr()
    third, flipped = job(tmp_path, noise, "three")
    line = flipped.splitlines()[0]
    assert line.startswith("claim ffn_vs_attn flipped: holds [-")
    assert "-> indistinguishable [" in line and len(flipped.splitlines()) == 1
    assert line in capsys.readouterr().out  # the log says it too
    assert "ffn\\_vs\\_attn flipped" in (third / "flips.tex").read_text()
    history = (tmp_path / "history" / "claims.jsonl").read_text().splitlines()
    assert len(history) == 3  # append-only: one entry per build


# ---- multiple comparisons, exact zeros, gradient opponents -----------------------------------


def test_holm_and_benjamini_hochberg_on_a_known_p_vector():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone
    assert cl.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: times 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04, 0.04, monotone from the largest down
    assert cl.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert cl.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert cl.holm([]) == [] and cl.benjamini_hochberg([0.2]) == [0.2]


def test_p_value_is_the_paired_t_test_and_tost_for_equivalence():
    from scipy import stats

    a, b = [228.0, 230.0, 226.5, 231.0], [229.0, 232.5, 227.0, 231.5]
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert cl.p_value(d, "direction") == pytest.approx(stats.ttest_rel(a, b).pvalue)
    lower = stats.ttest_1samp(d, -1.0, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, 1.0, alternative="less").pvalue
    assert cl.p_value(d, "equivalence", 1.0) == pytest.approx(max(lower, upper))
    assert cl.p_value([1.0], "direction") is None  # one seed: no test
    assert cl.p_value([0.0, 0.0], "direction") == 1.0 and cl.p_value([2.0, 2.0], "share_sum") == 0.0


def test_exact_zero_difference_is_identical_by_construction_not_agreement(tmp_path):
    same = [228.0, 230.0, 226.5, 229.0, 231.0]
    res = evaluate(tmp_path, {("ffn_only", "test_ppl"): same, ("attn_only", "test_ppl"): same})
    r = res["ffn_vs_attn"]
    assert r.verdict == cl.IDENTICAL == "identical by construction" and r.identical
    assert r.n == 5 and r.diff == 0.0 and r.agree == 0  # no seed "agrees" with a zero
    assert text.fmt_agree(r) == "--" and "5/5" not in r.sentence
    assert r.sentence == (
        "FFN-only and attention-only are identical by construction: the paired difference in "
        "test perplexity is exactly 0 at each of the 5 seeds"
    )
    assert r.p_holm is None and not cl.in_family(r)  # not a test: outside the family
    # one seed differing by a hair is a measurement again, with its agreement count
    close = evaluate(tmp_path, {("ffn_only", "test_ppl"): same,
                                ("attn_only", "test_ppl"): [*same[:4], 231.0 + 1e-9]})["ffn_vs_attn"]  # fmt: skip
    assert close.verdict == cl.INDISTINGUISHABLE and close.agree == 1


def test_family_adjustment_is_reported_beside_the_unadjusted_verdicts(tmp_path):
    values = {  # ffn_vs_attn holds clearly; acc holds narrowly (p ~ 0.03); same is noise
        ("ffn_only", "test_ppl"): [228.0, 230.0, 226.5],
        ("attn_only", "test_ppl"): [260.0, 262.5, 257.0],
        ("ffn_only", "test_acc"): [0.300, 0.310, 0.305],
        ("attn_only", "test_acc"): [0.290, 0.292, 0.296],
        ("refit", "test_ppl"): [98.0, 103.0, 100.0],
        ("refit_single8d", "test_ppl"): [100.1, 100.0, 100.0],
    }
    res = evaluate(tmp_path, values)
    acc, ppl = res["acc"], res["ffn_vs_attn"]
    assert acc.verdict == ppl.verdict == cl.HOLDS
    family = [r for r in res.values() if cl.in_family(r)]
    assert {r.id for r in family} == {"ffn_vs_attn", "acc", "same"}  # the others did not run
    ps = [r.p_value for r in family]
    assert [r.p_holm for r in family] == pytest.approx(cl.holm(ps))
    assert [r.p_bh for r in family] == pytest.approx(cl.benjamini_hochberg(ps))
    assert 0.01 < acc.p_value < 0.05 and acc.p_holm >= 0.05 and not acc.holds_holm
    assert ppl.holds_holm and ppl.holds_bh
    macros = text.claim_macros(list(res.values()), {"lm": dict(SPEC, study="lm")})
    assert (macros["ClaimNFamily"], macros["ClaimNHold"], macros["ClaimNHoldHolm"]) == (
        "3",
        "2",
        "1",
    )
    assert macros["ClaimAccPHolm"] == text.fmt_p(acc.p_holm) and macros["ClaimAccP"] != "--"
    table = text.claims_table(list(res.values()), {"lm": dict(SPEC, study="lm")})
    row = next(r for r in table.rows if r[0].startswith("acc"))
    assert row[6:9] == [text.fmt_p(acc.p_value), text.fmt_p(acc.p_holm), "holds"]


OPPONENT_SPEC = {
    "metrics": {"accuracy": {"noun": "accuracy", "better": "higher", "digits": 1}},
    "names": {"m_lora": "tuned LoRA", "m_head": "the head", "m_ridge": "the readout"},
    "opponents": ["m_lora"],
    "claims": [
        {"id": "lora_vs_head", "metric": "accuracy", "arms": ["m_lora", "m_head"],
         "test": "direction", "group": "g"},
        {"id": "head_vs_lora", "metric": "accuracy", "arms": ["m_head", "m_lora"],
         "test": "direction"},
        {"id": "ridge_vs_head", "metric": "accuracy", "arms": ["m_ridge", "m_head"],
         "test": "direction", "group": "g"},
    ],
    "groups": {"g": {"what": "methods"}},
}  # fmt: skip


def opponent_frame(trained: list[float | None]) -> pl.DataFrame:
    rows = [{"arm": arm, "metric": "accuracy", "seed": s, "value": v}
            for arm, vals in (("m_lora", [81.0, 82.0, 80.5]), ("m_head", [70.0, 71.0, 69.5]),
                              ("m_ridge", [75.0, 76.5, 74.0]))
            for s, v in enumerate(vals)]  # fmt: skip
    rows += [{"arm": "m_lora", "metric": "trained", "seed": s, "value": t}
             for s, t in enumerate(trained) if t is not None]  # fmt: skip
    return claim_frame(rows)


def evaluate_opponent(tmp_path, trained, spec=OPPONENT_SPEC) -> dict[str, cl.Result]:
    path = tmp_path / "lora.yaml"
    path.write_text(yaml.safe_dump(spec))
    claims, specs = cl.load_claims([path])
    return {r.id: r for r in cl.evaluate(claims, specs, {"lora": opponent_frame(trained)})}


def test_claim_against_an_opponent_that_did_not_train_is_not_evaluated(tmp_path):
    res = evaluate_opponent(tmp_path, [1.0, 0.0, 0.0])
    for cid in ("lora_vs_head", "head_vs_lora"):  # the opponent on either side
        r = res[cid]
        assert r.verdict == cl.OPPONENT_UNTRAINED == "opponent did not train"
        assert r.opponents == "m_lora" and r.untrained == "m_lora: seeds 1, 2"
        assert r.diff is not None and r.p_holm is None  # recorded, not tested
        assert (
            "is not evaluated" in r.sentence
            and "tuned LoRA did not train at seeds 1, 2 (" in r.sentence
        )
        assert not re.search(r"\b(lower|higher)\b", r.sentence)
    assert res["ridge_vs_head"].verdict == cl.HOLDS and res["ridge_vs_head"].opponents == ""
    spec = dict(OPPONENT_SPEC, study="lora")
    group = text.group_sentence("g", list(res.values()), spec)
    assert group.startswith("1 of the 1 methods reach a higher accuracy")  # LoRA not counted
    macros = text.claim_macros(list(res.values()), {"lora": spec})
    assert macros["ClaimNUntrained"] == "2" and macros["ClaimNFamily"] == "1"
    table = text.claims_table(list(res.values()), {"lora": spec})
    assert table.rows[0][-1] == "opponent did not train"
    trained = evaluate_opponent(tmp_path, [1.0, 1.0, 1.0])
    assert trained["lora_vs_head"].verdict == cl.HOLDS and trained["lora_vs_head"].untrained == ""


def test_opponent_without_a_trained_record_names_the_fix(tmp_path):
    with pytest.raises(
        cl.ClaimsError, match=r"opponent m_lora has no 'trained' record at seeds \[2\]"
    ):
        evaluate_opponent(tmp_path, [1.0, 1.0, None])
    with pytest.raises(cl.ClaimsError, match=r"opponents \[.m_typo.\] match no arm of a claim"):
        evaluate_opponent(tmp_path, [1.0] * 3, dict(OPPONENT_SPEC, opponents=["m_lora", "m_typo"]))
    with pytest.raises(cl.ClaimsError, match="opponents must be a list"):
        evaluate_opponent(tmp_path, [1.0] * 3, dict(OPPONENT_SPEC, opponents="m_lora"))


def test_opponents_may_be_patterns_that_match_arms(tmp_path):
    """``m_l*`` names m_lora; a pattern that matches no arm of a claim is refused."""
    res = evaluate_opponent(tmp_path, [1.0, 0.0, 1.0], dict(OPPONENT_SPEC, opponents=["m_l*"]))
    assert res["lora_vs_head"].opponents == "m_lora"
    assert res["lora_vs_head"].verdict == cl.OPPONENT_UNTRAINED
    assert res["lora_vs_head"].untrained == "m_lora: seed 1"
    with pytest.raises(cl.ClaimsError, match=r"opponents \['\*/x'\] match no arm"):
        evaluate_opponent(tmp_path, [1.0] * 3, dict(OPPONENT_SPEC, opponents=["m_l*", "*/x"]))


def test_declared_opponents_are_gradient_arms_whose_frames_record_training():
    """Every claims file's opponents are arms its claims name; the lora study lists LoRA."""
    claims, specs = cl.load_claims(sorted((ROOT / "paper" / "claims").glob("*.yaml")))
    assert set(specs["lora"]["opponents"]) == {"minilm_lora", "pillm_lora"}
    # every study with a gradient-trained arm in a claim lists it (pillm.paper.claims.untrained)
    assert {"lm", "lora", "generative", "scaling", "saffu"} <= {
        s for s, spec in specs.items() if spec["opponents"]
    }
    for c in claims:
        assert set(c.opponents) <= {c.a, c.b}


# ---- the paper's prose: direction words only through claim macros ---------------------------

SECTIONS = ["abstract", "introduction", "experiments", "analysis", "conclusion", "generative", "lora",
            "saffu", "probe"]  # fmt: skip
DIRECTION = re.compile(
    r"\b(better|worse|beats?|outperforms?|lower|higher|below|above|exceeds?|improves?)\b", re.I
)
# Non-claim uses: definitions and descriptions that state no measured comparison.
ALLOWED = [
    r"layers above",  # position in the stack
    r"the share above belong",  # position in the text (the sensitivity paragraph)
    r"exceeds \$100\\,\\%\$ for a variant with a lower test loss than the baseline",  # definition
    r"negative for one above the floor",  # definition of the share
    r"can in\s+principle improve",  # what a target could do, not a measurement
    r"closed-form FFNs with better ones",  # limitation, no measurement
    r"exceeds\s+\$\\ProbeKappaMax\$",  # the solver's condition-number rule (probe method)
    r"eigenvalues? (is )?below",  # the eigen solve's cut-off (probe method)
    r"directions of lower variance, and terms of higher order",  # what the probe cannot see
    r"A block\s+below the diagonal explains its high-variance output coordinates better",  # reading
    r"has a lower\s+held-out \$R\^2\$ than the closed-form fit for \\ProbeGradBelow\{\}",  # a count
    r"score higher through the implicit regularisation",  # what could happen, not a measurement
]


def typed_directions(text: str) -> list[str]:
    text = re.sub(r"(?<!\\)%.*", "", text)  # comments
    for pattern in ALLOWED:
        text = re.sub(pattern, "", text)
    return [m.group(0) for m in DIRECTION.finditer(text)]


@pytest.mark.parametrize("section", SECTIONS)
def test_sections_state_directions_only_through_claim_macros(section):
    text = (ROOT / "paper" / "sections" / f"{section}.tex").read_text()
    assert typed_directions(text) == [], (
        f"paper/sections/{section}.tex types a direction word; state it through a \\Claim macro "
        "from paper/claims/ (or add a non-claim use to ALLOWED in tests/paper/test_claims.py)"
    )


def test_scan_catches_a_typed_direction():
    assert typed_directions("FFN-only beats attention-only.") == ["beats"]
    assert typed_directions("Over 3 seeds, \\ClaimFfnVsAttn.") == []
    assert typed_directions("% a comment that is lower\n") == []


def test_declared_claims_file_loads_and_names_known_variants():
    from pillm.lm.variants import VARIANTS as KNOWN

    claims, specs = cl.load_claims(sorted((ROOT / "paper" / "claims").glob("*.yaml")))
    lm = [c for c in claims if c.study == "lm"]
    assert lm, "paper/claims/lm.yaml declares no claims"
    unknown = {v for c in lm for v in (c.a, c.b, c.reference) if v and v not in KNOWN}
    assert not unknown, f"paper/claims/lm.yaml names variants pillm.plan does not define: {unknown}"
