"""The scaling study: its plan (torch-free job lists and params), the trend math on hand-set
numbers, and the report on a tiny synthetic set of point records."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pillm.core.config import ConfigError, apply_schema
from pillm.lm import scaling as plan
from pillm.lm.scaling_stats import (
    FLAT,
    GROWS,
    NO_INTERVAL,
    SHRINKS,
    TOO_FEW,
    UNDECIDED,
    ols_slope,
    power_exponent,
    slope_interval,
    trend,
    trend_verdict,
)

REPO = Path(__file__).resolve().parents[2]


def load(name: str) -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    return apply_schema(cfg, REPO / "config/schema.yaml")


SMOKE, PAPER = load("smoke.yaml"), load("config.yaml")


# ---- the plan ----------------------------------------------------------------------------------


def test_points_meet_at_the_base_and_cover_every_axis():
    names = [f"{p.corpus}/{p.name}" for p in plan.points(SMOKE)]
    assert names == [
        "wikitext2/d32_L1_f100", "wikitext2/d64_L1_f100", "wikitext2/d32_L2_f100",
        "wikitext2/d32_L1_f50", "ptb/d32_L1_f100", "ptb/d64_L1_f100",
    ]  # fmt: skip
    paper = plan.points(PAPER)
    assert len(paper) == 5 + 2 + 2 + 2 * len(PAPER["scaling"]["corpus_widths"])
    assert plan.parse_point("ptb", "d384_L4_f25") == plan.Point("ptb", 384, 4, 0.25)
    width = plan.axis_points(PAPER, "wikitext2", "width")
    assert [p.d_model for p in width] == [128, 256, 384, 512, 768]
    assert [p.d_model for p in plan.axis_points(PAPER, "ptb", "width")] == [128, 256]


def test_the_widest_points_start_first():
    """d²·L at least 4x the base point's (d=256, L=4): d=512 and 768 start with the AdamW arms."""
    wide = [
        p.name for p in plan.points(PAPER) if plan.priority_class(PAPER, p.name) == "scaling_wide"
    ]
    assert wide == ["d512_L4_f100", "d768_L4_f100"]
    assert plan.priority_class(PAPER, "d256_L8_f100") == "scaling_point"


def test_every_scaling_claim_arm_has_a_sentence_label():
    claims = yaml.safe_load((REPO / "paper/claims/scaling.yaml").read_text())["claims"]
    labels = plan.arm_labels(PAPER, {"ffn_only": "FFN only", "attn_only": "attention only"})
    arms = {a for c in claims for a in c["arms"]}
    assert arms <= set(labels)  # no claim falls back to its raw arm id in the paper
    assert labels["ptb/d256_L4_f100/ffn_only"] == (
        "FFN only: PTB, $d=256$, 4 layers, 100\\,\\% of the tokens"
    )
    assert labels["wikitext2/d256_L4_f25/pil_then_attn"].endswith("25\\,\\% of the tokens")


def test_declared_arms_outside_the_configs_points_get_labels_too():
    """The smoke config runs other points than the claims file names: those rows (not run) read
    in words, not as an unbreakable id that overflows the claims table."""
    arms = set(plan.declared_arms(REPO / "paper/claims/scaling.yaml"))
    assert len(arms) > 20
    labels = plan.arm_labels(SMOKE, {}, arms)
    assert arms <= set(labels) and not set(plan.arm_labels(SMOKE, {})) >= arms
    assert labels["wikitext2/d128_L4_f100/ffn_only"] == (
        "ffn_only: WikiText-2, $d=128$, 4 layers, 100\\,\\% of the tokens"
    )


def test_point_params_set_the_size_heads_epochs_and_families():
    p = plan.point_params(PAPER, "wikitext2", "d768_L4_f100")
    assert list(p["runs"]) == PAPER["scaling"]["variants"] and p["seeds"] == [0, 1, 2]
    base = p["runs"]["baseline"]
    assert base["model"] | {} == {**PAPER["model"], "d_model": 768, "n_layer": 4, "n_head": 12}
    assert base["train"]["epochs"] == PAPER["scaling"]["epochs"]
    # the config's output layer at every width: the trainer decides where the fused kernels
    # serve a width on its device (pillm.lm.train_step.output_layer_at)
    assert base["train"]["output_layer"] == PAPER["train"]["output_layer"] == "fused"
    assert "pil" in p["runs"]["pil_then_attn"] and "pil" not in base
    assert p["families"] == {"full": ["baseline", "frozen_ffn_attn", "pil_then_attn"],
                             "attn": ["attn_only"], "ffn": ["ffn_only"]}  # fmt: skip
    other = plan.point_params(PAPER, "ptb", "d128_L4_f100")
    assert list(other["runs"]) == PAPER["scaling"]["corpus_variants"]
    smoke = plan.point_params(SMOKE, "wikitext2", "d32_L2_f100")["runs"]["attn_only"]
    assert smoke["train"]["max_steps"] == SMOKE["scaling"]["max_steps"]
    assert smoke["model"]["n_head"] == 32 // SMOKE["scaling"]["head_dim"]


def test_files_and_params_of_the_rules():
    assert plan.point_outputs("{corpus}", "{point}") == {
        "runs": "scaling/{corpus}/{point}/runs.parquet",
        "curves": "scaling/{corpus}/{point}/curves.parquet",
        "lr": "scaling/{corpus}/{point}/lr.json",
    }
    assert (
        plan.point_token_files("wikitext2", "d32_L1_f50")[0]
        == "scaling/tokens/wikitext2/f50/train.npy"
    )
    inputs = plan.report_inputs(SMOKE)
    assert len(inputs["lr"]) == len(plan.points(SMOKE)) and inputs["cost"] == "scaling/cost.json"
    assert sorted(inputs["metas"]) == sorted({
        "scaling/tokens/wikitext2/f100/meta.json", "scaling/tokens/wikitext2/f50/meta.json",
        "scaling/tokens/ptb/f100/meta.json"})  # fmt: skip
    assert plan.tokens_params(PAPER, 25) == {"fraction": 0.25, "eval_tokens": 0}
    cost = plan.cost_params(PAPER)
    assert cost["widths"] == [128, 256, 384, 512, 768] and cost["model"]["n_layer"] == 4
    rep = plan.report_params(SMOKE)
    assert rep["axes"]["wikitext2"]["depth"] == ["d32_L1_f100", "d32_L2_f100"]
    assert rep["axes"]["ptb"] == {"width": ["d32_L1_f100", "d64_L1_f100"]}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"widths": [64, 128]}, r"scaling\.widths: \[64, 128\] must hold 32 \(scaling\.base\.d_model\)"),
        ({"depths": [2, 3]}, r"scaling\.depths: \[2, 3\] must hold 1 .*Add 1 to scaling\.depths"),
        ({"fractions": [0.25, 0.5]}, r"scaling\.fractions: \[0\.25, 0\.5\] must hold 1\.0"),
        ({"head_dim": 48}, r"scaling\.widths: 32 is not a multiple of scaling\.head_dim 48"),
        ({"fractions": [0.333, 1.0]}, r"scaling\.fractions: .* distinct whole percentages"),
        ({"fractions": [0.501, 0.5, 1.0]}, r"scaling\.fractions: .* distinct whole percentages"),
        ({"variants": ["attn_only", "ffn_only"]}, r"scaling\.variants needs \['baseline'\]"),
        ({"corpus_variants": ["baseline", "attn_only", "attn_then_pil"]},
         r"scaling\.corpus_variants: \['attn_then_pil'\] build on other runs.*Remove them"),
        ({"variants": ["baseline", "attn_only", "pil_then_attn"]},
         r"scaling\.variants lists pil_then_attn without frozen_ffn_attn.*List both or neither"),
        ({"corpus_variants": ["baseline", "attn_only", "frozen_ffn_attn"]},
         r"scaling\.corpus_variants lists frozen_ffn_attn without pil_then_attn"),
        ({"corpus_variants": ["baseline", "attn_only", "linear_ffn"]},
         r"scaling\.corpus_variants: \['linear_ffn'\] not in scaling\.variants.*Add them"),
        ({"corpus_widths": [32, 96]}, r"scaling\.corpus_widths: \[96\] not in scaling\.widths"),
        ({"lrs": [1e-3], "lr_extend": 1}, r"scaling\.lrs = \[0\.001\]: extending it .*scaling\.lr_extend"),
    ],
)  # fmt: skip
def test_check_names_the_bad_key_and_the_fix(change, message):
    cfg = copy.deepcopy(SMOKE)
    cfg["scaling"].update(change)
    with pytest.raises(ConfigError, match=message):
        plan.check(cfg)


def test_a_fraction_too_small_for_one_batch_is_named():
    """The smallest fraction of the main corpus's train split (its bytes, an upper bound on its
    tokens, in the offline mirror) must hold train.batch_size windows of model.context."""
    cfg = copy.deepcopy(SMOKE)
    cfg["scaling"]["fractions"] = [0.01, 1.0]
    cfg["train"]["batch_size"] = 1000
    with pytest.raises(ConfigError, match=r"scaling\.fractions: the wikitext2 train split at "
                       r"fraction 0\.01 holds at most \d+ windows of model\.context = 64 tokens, "
                       r"fewer than one batch \(train\.batch_size = 1000\): raise its smallest "
                       r"value 0\.01, or lower train\.batch_size"):  # fmt: skip
        plan.check(cfg)


def test_a_corpus_too_small_for_one_batch_is_named(monkeypatch):
    """The width axis of scaling.corpora trains on the whole split: a split whose bytes (an
    upper bound on its tokens) hold fewer than train.batch_size windows stops the check."""
    sizes = {"wikitext2": 10**6, "ptb": 16 * 64}  # ptb: 1,024 bytes, 15 windows of 64 < 16
    monkeypatch.setattr(plan, "split_bytes", lambda data, corpus: {"train": sizes[corpus]})
    with pytest.raises(ConfigError, match=r"scaling\.corpora: the ptb train split at fraction "
                       r"1\.0 holds at most 15 windows .*drop ptb from it"):  # fmt: skip
        plan.check(SMOKE)
    monkeypatch.setattr(plan, "split_bytes", lambda data, corpus: None)  # hub: sizes unknown
    plan.check(SMOKE)


def test_each_treatment_and_its_control_are_a_compared_pair():
    from pillm.lm.scaling_summary import PAIRS

    pairs = {(a, b) for _, a, b in PAIRS}
    assert all(pair in pairs for pair in plan.CONTROLS.items())


def test_both_configs_pass_the_check():
    plan.check(SMOKE)
    plan.check(PAPER)


# ---- the trend math ----------------------------------------------------------------------------


def test_known_slope_is_recovered():
    sizes = [1e6, 2e6, 4e6, 8e6]
    values = [[80 + 3 * k + e for e in (-0.5, 0.0, 0.5)] for k in range(4)]
    assert ols_slope(np.log2(sizes), [80 + 3 * k for k in range(4)]) == pytest.approx(3.0)
    out = slope_interval(sizes, values, resamples=2000)
    assert out["slope"] == pytest.approx(3.0)
    assert out["lo"] < 3.0 < out["hi"] and out["n_points"] == 4 and out["n_seeds"] == 3


def test_interval_against_the_margin_decides_the_verdict():
    assert trend_verdict(0.1, -0.5, 0.7, margin=2.0) == FLAT
    assert trend_verdict(3.0, 2.5, 3.5, margin=2.0) == GROWS
    assert trend_verdict(-3.0, -3.5, -2.5, margin=2.0) == SHRINKS
    # excludes zero but not the margin: no direction is stated
    assert trend_verdict(2.0, 1.0, 3.0, margin=2.0) == UNDECIDED
    assert trend_verdict(0.1, None, None, margin=2.0) == NO_INTERVAL
    assert trend_verdict(None, None, None, margin=2.0) == TOO_FEW


def test_trend_on_hand_set_points():
    sizes = [1, 4, 16]
    flat = [[50.0, 50.2, 49.8], [50.1, 49.9, 50.0], [49.9, 50.1, 50.0]]
    assert trend(sizes, flat, margin=2.0, resamples=1000)["verdict"] == FLAT
    rising = [[50.0, 50.2, 49.8], [58.0, 58.2, 57.8], [66.0, 66.2, 65.8]]  # +4 per doubling
    t = trend(sizes, rising, margin=2.0, resamples=1000)
    assert t["slope"] == pytest.approx(4.0) and t["verdict"] == GROWS
    one_seed = trend(sizes, [[50.0], [51.0], [52.0]], margin=2.0, resamples=100)
    assert one_seed["verdict"] == NO_INTERVAL and one_seed["slope"] == pytest.approx(0.5)
    assert trend([1], [[50.0, 51.0]], 2.0, 100)["verdict"] == TOO_FEW


def test_power_exponent_of_a_cubic():
    d = [128, 256, 512]
    assert power_exponent(d, [x**3 * 1e-9 for x in d]) == pytest.approx(3.0)
    assert power_exponent([128], [1.0]) is None


# ---- the report on a tiny synthetic summary ------------------------------------------------------


PPL = {"baseline": 100.0, "attn_only": 120.0, "ffn_only": 140.0, "pil_then_attn": 118.0,
       "frozen_ffn_attn": 121.0}  # fmt: skip
# The one run whose training loss fell by less than lm.trained_margin (0.1 nats in the smoke
# config): the frozen control at wikitext2 d64_L1_f100, seed 1, 0.05 nats.
UNTRAINED = ("wikitext2", "d64_L1_f100", "frozen_ffn_attn", 1)


def write_point(root: Path, corpus: str, name: str, variants: list[str], seeds: list[int]) -> Path:
    pt = plan.parse_point(corpus, name)
    folder = root / "scaling" / corpus / name
    folder.mkdir(parents=True)
    rows, curves = [], []
    for v in variants:
        for s in seeds:
            ppl = PPL[v] * (1 + 0.01 * s) * (256 / pt.d_model) ** 0.05
            metrics = {"test_loss": math.log(ppl), "test_ppl": ppl, "test_acc": 0.2,
                       "val_loss": math.log(ppl) + 0.01, "params_non_embedding": 12.0 * pt.n_layer * pt.d_model**2,
                       "params_total": 1e6, "grad_time_s": 1.0, "solve_time_s": 0.0,
                       "train_steps": 10.0 * pt.fraction, "train_loss_first": 6.0,
                       "train_loss_final": 5.95 if (corpus, name, v, s) == UNTRAINED else 5.0}  # fmt: skip
            ident = {"experiment": "lm", "variant": v, "seed": s, "corpus": corpus,
                     "git_rev": "abc", "device_name": "cpu", "point": name}  # fmt: skip
            rows += [{**ident, "metric": k, "value": x} for k, x in metrics.items()]
            for step, val in ((5, 4.9), (10, 4.9 + (0.05 if pt.d_model > 32 else -0.1))):
                curves.append({**ident, "step": step, "tokens": step * 100, "lr": 1e-3,
                               "train_loss": 5.0, "val_loss": val})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), folder / "runs.parquet")
    pq.write_table(pa.Table.from_pylist(curves), folder / "curves.parquet")
    fams = plan.families(variants)
    record = {"families": {f: {"selector": m[0], "members": m, "seed": seeds[0], "lr": 1e-3,
                               "grid": [1e-3, 3e-3], "edge_hit": True, "extensions": 0,
                               "on_edge": True, "runs": [{"lr": 1e-3, "val_loss": 5.0},
                                                         {"lr": 3e-3, "val_loss": 5.1}]}
                           for f, m in fams.items()},
              "lr": {v: 1e-3 for v in variants}}  # fmt: skip
    (folder / "lr.json").write_text(json.dumps(record))
    return folder / "lr.json"


def test_report_on_a_tiny_synthetic_summary(tmp_path):
    cfg = copy.deepcopy(SMOKE)
    cfg["scaling"]["seeds"] = [0, 1]
    params = plan.report_params(cfg)
    lrs = []
    for p in plan.points(cfg):
        lrs.append(str(write_point(tmp_path, p.corpus, p.name, plan.point_variants(cfg, p.corpus),
                                   cfg["scaling"]["seeds"])))  # fmt: skip
    metas = []
    for corpus, pct in (("wikitext2", 100), ("wikitext2", 50), ("ptb", 100)):
        meta = tmp_path / "scaling" / "tokens" / corpus / f"f{pct}" / "meta.json"
        meta.parent.mkdir(parents=True)
        meta.write_text(json.dumps({"policy": f"local:{corpus}", "train_fraction": pct / 100,
                                    "tokens": {"train": 1000 * pct, "valid": 100, "test": 100},
                                    "unigram_test_loss": 6.0}))  # fmt: skip
        metas.append(str(meta))
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps([{"d_model": d, "features": 8.0 * d + 1, "gram_s": 0.1 * d,
                                 "decompose_s": 1e-6 * d**3, "solve_s": 0.1 * d + 1e-6 * d**3,
                                 "adamw_s": 0.5 * d, "device_name": "cpu"} for d in (32, 64)]))  # fmt: skip
    from pillm.lm.scaling_report import scaling_report

    summary = tmp_path / "summary" / "scaling_runs.parquet"
    claims = tmp_path / "summary" / "claims" / "scaling.parquet"
    tables = [str(tmp_path / "tables" / f"scaling_{t}.tex") for t in plan.TABLES]
    numbers = tmp_path / "scaling_numbers.tex"
    scaling_report(lrs, metas, str(cost), params, [str(REPO / "paper/templates/macros.tex.j2")],
                   str(summary), str(claims), tables, str(numbers))  # fmt: skip

    runs = pl.read_parquet(summary)
    assert runs.height == (4 * 5 + 2 * 3) * 2  # points x variants x seeds
    points = pl.read_parquet(summary.with_name("scaling_points.parquet"))
    base = points.filter((pl.col("corpus") == "wikitext2") & (pl.col("point") == "d32_L1_f100"))
    assert base["attn_ratio"].item() == pytest.approx(100 / 120)
    shift = [math.log(8**0.05 * (1 + 0.01 * s)) for s in (0, 1)]  # d=32 and seed factors
    share = np.mean([(6.0 - math.log(120) - x) / (6.0 - math.log(100) - x) for x in shift])
    assert base["attn_share"].item() == pytest.approx(share)
    assert base["ffn_vs_attn_verdict"].item() == "reversed"  # FFN-only has the higher PPL
    assert base["pil_vs_frozen_verdict"].item() == "holds"  # every opponent trained here
    # the frozen control fell by 0.05 < 0.1 nats at one seed: its comparison is not made
    bad = runs.filter((pl.col("point") == "d64_L1_f100") & (pl.col("corpus") == "wikitext2")
                      & (pl.col("variant") == "frozen_ffn_attn")).sort("seed")  # fmt: skip
    assert bad["trained"].to_list() == [1.0, 0.0]
    assert bad["train_loss_drop"].to_list() == pytest.approx([1.0, 0.05])
    skipped = points.filter((pl.col("corpus") == "wikitext2") & (pl.col("point") == "d64_L1_f100"))
    assert skipped["pil_vs_frozen_verdict"].item() == "opponent did not train"
    assert skipped["ffn_vs_attn_verdict"].item() == "reversed"  # its arms trained
    trends = pl.read_parquet(summary.with_name("scaling_trends.parquet"))
    assert set(trends["axis"]) == {"width", "depth", "data"} and trends.height == 2 * (3 + 1)
    frame = pl.read_parquet(claims)
    assert frame.filter(pl.col("b").is_null()).height == runs.height * 3  # ppl, loss, trained
    assert frame.filter(pl.col("b").is_not_null()).height == trends.height
    text = numbers.read_text()
    for macro in ("ScalHeadline", "ScalMargin", "ScalCostSolveExponent", "ScalOverfitPoints"):
        assert f"\\newcommand{{\\{macro}}}" in text
    assert "\\newcommand{\\ScalOverfitPoints}{2 of 6}" in text  # the d=64 curves rise
    # the data axis keeps the epochs: half the split trains half the steps, said by macro
    assert "\\newcommand{\\ScalDataSteps}{5 and 10}" in text
    assert "\\newcommand{\\ScalBaseSteps}{10}" in text
    assert "\\newcommand{\\ScalDataBelowFloor}{0 of 4}" in text  # every share is positive
    shape = (cfg["scaling"]["head_dim"], cfg["model"]["ffn_mult"])
    assert f"\\newcommand{{\\ScalHeadDim}}{{{shape[0]}}}" in text  # the config's, not typed
    assert f"\\newcommand{{\\ScalFfnMult}}{{{shape[1]}}}" in text
    # a trend verdict reads as the verb of its sentence ("its PPL ratio grows")
    from pillm.lm import scaling_stats as st
    from pillm.lm.scaling_report import TREND_VERB

    verdicts = {st.FLAT, st.GROWS, st.SHRINKS, st.UNDECIDED, st.NO_INTERVAL, st.TOO_FEW}
    assert set(TREND_VERB) == verdicts  # every verdict trend_test can return
    ratio = trends.filter((pl.col("corpus") == "wikitext2") & (pl.col("axis") == "width")
                          & (pl.col("measure") == "attn_ratio"))  # fmt: skip
    verb = TREND_VERB[ratio["verdict"].item()]
    assert f"\\newcommand{{\\ScalMainWidthAttnRatioTrend}}{{{verb}}}" in text
    # the frozen FFN of standard initialisation is named as what it is, not as the solve's control
    pair = text.split("\\newcommand{\\ScalPairPilVsFrozen}{", 1)[1].split("\n", 1)[0]
    assert "attention over a frozen random FFN" in pair and "control" not in pair
    caption = Path(tables[plan.TABLES.index("points")]).read_text()
    assert "does not isolate the solve" in caption
    assert "(s)" not in caption and "mean over 2 seeds" in caption  # the number in words
    assert f"\\newcommand{{\\ScalGradientRuns}}{{{runs.height}}}" in text
    assert "\\newcommand{\\ScalUntrainedRuns}{1}" in text
    assert "\\newcommand{\\ScalMinTrainLossDrop}{0.05}" in text
    assert "at 1 point the two were not compared" in text
    assert "untrained" in Path(tables[0]).read_text()
    # the declared claim against that control is not evaluated, and says why
    from pillm.paper.claims import evaluate, load_claims

    spec = {"metrics": {"test_ppl": {"noun": "test perplexity", "better": "lower", "digits": 1}},
            "opponents": ["*/frozen_ffn_attn"],
            "claims": [{"id": f"pf_{pt}", "metric": "test_ppl", "test": "direction",
                        "arms": [f"wikitext2/{pt}/pil_then_attn", f"wikitext2/{pt}/frozen_ffn_attn"]}
                       for pt in ("d32_L1_f100", "d64_L1_f100")]}  # fmt: skip
    (tmp_path / "scaling.yaml").write_text(json.dumps(spec))
    res = {r.id: r for r in evaluate(*load_claims([tmp_path / "scaling.yaml"]),
                                     {"scaling": pl.read_parquet(claims)})}  # fmt: skip
    assert res["pf_d32_L1_f100"].verdict == "holds"
    assert res["pf_d64_L1_f100"].verdict == "opponent did not train"
    assert res["pf_d64_L1_f100"].untrained == "wikitext2/d64_L1_f100/frozen_ffn_attn: seed 1"
    for t in tables:
        assert "\\begin{table}" in Path(t).read_text()

    from pillm.lm.scaling_figures import scaling_figures

    pdfs = [str(tmp_path / f"{a}.pdf") for a in plan.AXES]
    pngs = [str(tmp_path / f"{a}.png") for a in plan.AXES]
    scaling_figures(str(summary), "wikitext2", pdfs, pngs)
    assert all(Path(p).stat().st_size > 0 for p in pdfs + pngs)


def test_declared_claims_match_the_frame_arms():
    """Every arm of paper/claims/scaling.yaml is one of the paper config's runs."""
    from pillm.lm.scaling_summary import arm
    from pillm.paper.claims import load_claims

    claims, _ = load_claims([str(REPO / "paper/claims/scaling.yaml")])
    arms = {arm(p.corpus, p.name, v) for p in plan.points(PAPER)
            for v in plan.point_variants(PAPER, p.corpus)}  # fmt: skip
    assert {c.a for c in claims} | {c.b for c in claims} <= arms


def test_budget_macros_count_attention_only_runs_below_the_unigram_floor():
    from types import SimpleNamespace

    from pillm.lm.scaling_report import budget_macros

    data = ["d32_L1_f25", "d32_L1_f100"]
    cfg = SimpleNamespace(main="wikitext2", axes={"wikitext2": {"data": data}})
    runs = pl.DataFrame({"corpus": "wikitext2", "variant": "baseline", "point": data,
                         "train_steps": [28.0, 112.0]})  # fmt: skip
    shares = pl.DataFrame({"corpus": "wikitext2", "point": [data[0]] * 3 + [data[1]] * 3,
                           "attn_share": [-0.5, 0.1, -0.2, 0.7, 0.7, 0.8]})  # fmt: skip
    m = budget_macros(runs, shares, cfg)
    assert (m["ScalDataSteps"], m["ScalBaseSteps"], m["ScalDataBelowFloor"]) == (
        "28 and 112", "112", "2 of 6")  # fmt: skip
