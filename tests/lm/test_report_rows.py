"""Rows and macros of the LM report that come from the new records: the Kneser-Ney row of the
main table, solved parameters of a zero target, the layer-solve tables, LAMBADA's out-of-train
share and the gradient-trained runs' records."""

import math

import polars as pl

from pillm.lm.comparisons import LMReport
from pillm.lm.macros import (
    kneser_ney_numbers,
    lambada_numbers,
    lm_numbers,
    trained_numbers,
    width_sweep_sentence,
)
from pillm.lm.report import LM_TABLES, lm_captions
from pillm.lm.solve_table import fmt_lambda, lambda_cell, sci_pm_cell, solve_tables
from pillm.paper.tidy import summarise

BASE = {"test_ppl": 200.0, "test_loss": math.log(200.0), "test_acc": 0.2, "test_bpb": 1.6,
        "params_trainable": 3e6, "params_solved": 0.0, "grad_time_s": 10.0, "solve_time_s": 0.0,
        "lambada_acc": 0.0}  # fmt: skip


def report(extra: dict[str, dict[str, float]], seeds=(0, 1)) -> LMReport:
    """Runs of ``baseline`` (BASE) and the variants of ``extra`` (BASE overridden), per seed (test
    metrics 0.1 apart from seed to seed, the others the same)."""
    per_variant = {"baseline": BASE, **{v: {**BASE, **m} for v, m in extra.items()}}
    rows = [{"experiment": "lm", "variant": v, "seed": s, "corpus": "c", "tokenizer": "t",
             "data_policy": "p", "metric": k,
             "value": x + 0.1 * s * k.startswith("test_")}
            for v, metrics in per_variant.items() for s in seeds
            for k, x in metrics.items()]  # fmt: skip
    runs = pl.DataFrame(rows)
    variants = list(per_variant)
    return LMReport(summarise(runs, {"variant": variants}, list(seeds)), runs, variants, 7.0)


def kn_summary(ppl: float) -> dict[str, dict]:
    row = {"ci95": 0.0, "n": 2}
    return {"test_ppl": {**row, "mean": ppl}, "test_loss": {**row, "mean": math.log(ppl)},
            "test_bpb": {**row, "mean": 1.5}, "order": {**row, "mean": 11.0}}  # fmt: skip


def test_main_table_ends_with_the_kneser_ney_row_and_says_when_a_solve_is_zero():
    rep = report({"attn_then_pil": {"params_solved": 0.0, "params_out_maps": 2.1e6}})
    assert [r[2] for r in rep.main_rows()] == ["0.00", "0 (target 0)"]  # no n-gram summary
    rep.kn = kn_summary(177.6)
    *_, rule, kn = rep.main_rows()
    assert rule == "midrule" and kn[0] == "Kneser-Ney 11-gram (train counts)"
    assert kn[5] == "177.6 \\ensuremath{\\pm} 0.0" and kn[7] == "1.500" and kn[1] == "--"
    macros = kneser_ney_numbers(rep)
    assert macros["KneserNeyOrder"] == "11" and macros["KneserNeyPPL"].startswith("177.6")
    assert macros["KneserNeyRatio"] == f"{100 * 200.05 / 177.6:.1f}"  # baseline mean / KN
    assert rep.contribution_rows()[1][0] == kn[0]  # the same row in the contribution table


def test_lambada_and_trained_macros():
    rep = report({"ffn_only": {}})
    assert set(lambada_numbers(rep).values()) == {"--"}  # no extras in this build
    assert trained_numbers(rep) == {"GradientRuns": "0", "UntrainedRuns": "0",
                                    "MinTrainLossDrop": "--"}  # fmt: skip
    rep = report({
        "ffn_only": {"trained": 0.0, "train_loss_drop": -0.05, "lambada_oov_share": 0.47,
                     "lambada_n": 5153.0, "lambada_n_seen": 2731.0},
    })  # fmt: skip
    assert lambada_numbers(rep) == {"LambadaCount": "5{,}153", "LambadaOovShare": "47.0",
                                    "LambadaSeenCount": "2{,}731"}  # fmt: skip
    assert trained_numbers(rep) == {"GradientRuns": "2", "UntrainedRuns": "2",
                                    "MinTrainLossDrop": "\\ensuremath{-}0.05"}  # fmt: skip


def test_main_table_reports_lambada_on_all_passages_and_on_those_with_seen_targets():
    rep = report({"ffn_only": {"lambada_acc": 0.01, "lambada_acc_seen": 0.02}})
    header = LM_TABLES["lm_main"][2]
    col = header.index("Seen (\\%)")
    assert header[col - 1] == "LAMBADA (\\%)"
    base, ffn = rep.main_rows()
    assert ffn[col - 1].startswith("1.0 ") and ffn[col].startswith("2.0 ")
    assert base[col] == "--"  # a run without the seen-target score shows it missing
    rep.kn = kn_summary(177.6)
    assert {len(r) for r in rep.main_rows() if r != "midrule"} == {len(header)}
    macros = lm_numbers(rep)  # the prose quotes the same figures
    assert macros["LambadaSeenFfnOnly"] == ffn[col] and macros["LambadaFfnOnly"] == ffn[col - 1]
    caption = lm_captions("t", "p", 2, "10", ("47.0", "2{,}731"), False)["lm_main"]
    assert "47.0\\,\\% of its passages" in caption
    assert "Seen: the same on the 2{,}731 passages" in caption


def test_width_sweep_sentence_names_the_configured_sweep_widths():
    variants = ["baseline", "refit_single", "refit_single8d", "refit_single16d", "refit_single1d"]
    assert width_sweep_sentence(variants) == (
        "A width sweep adds single projections of width $d$ and $16d$."
    )
    assert width_sweep_sentence([*variants, "refit_single2d"]).endswith("$d$, $2d$ and $16d$.")
    assert "no width sweep" in width_sweep_sentence(["baseline", "refit_single"])


def solve_records(variant: str, r2: float, norm: float, lams=(1e-4, 1e-4)) -> list[dict]:
    return [
        {"variant": variant, "seed": s, "layer": layer, "lambda_rel": lam, "val_mse": 0.5,
         "chosen": chosen, "heldout_r2": r2, "w_out_fro": norm + s}
        for s, lam in enumerate(lams) for layer in (0, 1)
        for chosen in (True, False)
    ]  # fmt: skip


def test_solve_tables_one_row_per_layer_split_into_targets_and_refits():
    solves = pl.DataFrame(
        solve_records("attn_then_pil", float("nan"), 0.0)
        + solve_records("pil_then_attn", 0.3, 10.0, lams=(1e-4, 1e-2))
        + solve_records("pil_random_out_attn", 0.3, 10.0)
        + solve_records("refit", 0.9, 5.0)
    )
    variants = ["baseline", "attn_then_pil", "pil_then_attn", "pil_random_out_attn", "refit"]
    long = solve_tables(solves, variants, "two seeds")
    strategies, refits = long.tables
    assert (strategies.label, refits.label) == ("tab:lm-solves", "tab:lm-solves-refit")
    first, second, rule, third, _ = strategies.rows
    assert rule == "midrule" and second[0] == "" and third[0] == "PIL$\\to$Attn"
    assert first[:3] == ["Attn$\\to$PIL (residual)", "0", "$10^{-4}$"]
    assert first[4] == "--" and first[5].startswith("0.50 \\ensuremath{\\pm}")  # zero target: no R²
    assert first[3] == "$(5.0 \\pm 0.0){\\times}10^{-1}$"  # held-out MSE
    assert third[2] == "$10^{-4}$--$10^{-2}$"  # seeds chose differently
    assert "random" in strategies.caption and len(refits.rows) == 2
    assert not solve_tables(solves.drop("heldout_r2"), variants, "x").tables  # older records


def test_lambda_in_latex():
    assert [fmt_lambda(x) for x in (0.0, 1e-6, 3e-4, 1.0)] == [
        "0", "$10^{-6}$", "$3{\\times}10^{-4}$", "$10^{0}$"]  # fmt: skip
    assert lambda_cell([1e-3, 1e-3]) == "$10^{-3}$"
    assert sci_pm_cell([4.1e-4]) == "$4.1{\\times}10^{-4}$" and sci_pm_cell([0.0]) == "0"
