import json
import math
from pathlib import Path

import polars as pl
import pytest

from pillm.lm.comparisons import LMReport, paired
from pillm.lm.macros import grid_edge_numbers, lm_numbers
from pillm.lm.report import LM_TABLES, lm_table, render_tables
from pillm.lm.variants import VARIANTS
from pillm.paper.latex import MISSING, fmt_pm, macro_name, make_env, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import LongTable, Table
from pillm.paper.tidy import ci95, summarise

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "paper" / "templates"
GOLDEN = Path(__file__).parent / "golden" / "lm_main.tex"
METRICS = {
    "test_ppl": [100.0, 110.0, 120.0],
    "test_acc": [0.20, 0.21, 0.22],
    "test_bpb": [1.5, 1.6, 1.7],
    "train_time_s": [10.0, 12.0, 14.0],
    "test_loss": [4.6, 4.7, 4.8],
    "params_total": [3.2e6] * 3,
    "params_non_embedding": [1.6e6] * 3,
    "tokens_per_s": [1000.0, 1100.0, 1200.0],
    "params_trainable": [3.2e6] * 3,
    "params_solved": [0.0] * 3,
    "grad_time_s": [10.0, 12.0, 14.0],
    "solve_time_s": [0.0] * 3,
    "lambada_acc": [0.05, 0.06, 0.07],
    "lambada_acc_seen": [0.10, 0.12, 0.14],
}


def fake_runs(seeds=(0, 1, 2)) -> pl.DataFrame:
    rows = []
    for metric, values in METRICS.items():
        for seed, value in zip((0, 1, 2), values, strict=True):
            if seed in seeds:
                rows.append(
                    {
                        "experiment": "lm",
                        "variant": "baseline",
                        "seed": seed,
                        "corpus": "wikitext2",
                        "tokenizer": "GPT-2 BPE",
                        "data_policy": "local:wikitext2:x",
                        "metric": metric,
                        "value": value,
                    }
                )
    return pl.DataFrame(rows)


def test_summary_mean_std_n():
    s = summarise(fake_runs(), {"variant": ["baseline"]}, [0, 1, 2])
    ppl = s.filter(pl.col("metric") == "test_ppl").row(0, named=True)
    assert ppl["mean"] == pytest.approx(110.0)
    assert ppl["std"] == pytest.approx(10.0)  # sample std, ddof = 1
    assert (ppl["n"], ppl["n_expected"]) == (3, 3)


def test_summary_ci95_is_the_t_interval_and_absent_for_one_seed():
    s = summarise(fake_runs(), {"variant": ["baseline"]}, [0, 1, 2])
    ppl = s.filter(pl.col("metric") == "test_ppl").row(0, named=True)
    assert ppl["ci95"] == pytest.approx(4.302653 * 10.0 / math.sqrt(3), rel=1e-6)
    one = summarise(fake_runs(seeds=(0,)), {"variant": ["baseline"]}, [0])
    assert one.filter(pl.col("metric") == "test_ppl")["ci95"].to_list() == [None]
    assert ci95(None, 1) is None and ci95(2.0, 1) is None


def test_edge_selection_macros_count_every_run():
    runs = pl.concat(
        [
            fake_runs(),
            pl.DataFrame(
                [
                    {
                        "experiment": "lm",
                        "variant": v,
                        "seed": seed,
                        "corpus": "wikitext2",
                        "tokenizer": "GPT-2 BPE",
                        "data_policy": "local:wikitext2:x",
                        "metric": metric,
                        "value": value,
                    }  # fmt: skip
                    for v in ("attn_then_fgrad", "not_listed")
                    for seed in (0, 1, 2)
                    for metric, value in (
                        ("pil_selections", 4.0),
                        ("pil_edge_selections", 1.0),
                        ("pil_edge_hits", 2.0),
                        ("pil_grid_extensions", 3.0),
                    )  # fmt: skip
                ]
            ),
        ]
    )
    variants = ["baseline", "attn_then_fgrad"]
    rep = LMReport(summarise(runs, {"variant": variants}, [0, 1, 2]), runs, variants, 6.0)
    assert grid_edge_numbers(rep) == {
        "PilSelections": "12",
        "PilEdgeHits": "6",
        "PilGridExtensions": "9",
        "PilEdgeSelections": "3",
    }


def test_every_registered_variant_has_its_macros_missing_where_not_run():
    """The prose quotes variants a config may leave out (experiments.tex: the refit width
    sweep), so their macros read `--' instead of being undefined; a run variant keeps its own."""
    runs = fake_runs()
    rep = LMReport(summarise(runs, {"variant": ["baseline"]}, [0, 1, 2]), runs, ["baseline"], 6.0)
    out = lm_numbers(rep)
    assert out["PPLBaseline"] == rep.pm("baseline", "test_ppl", 1) != MISSING
    for v in VARIANTS:
        if v != "baseline":
            name = macro_name(v, whole_numbers=True)
            assert out[f"PPL{name}"] == out[f"Solve{name}"] == MISSING, v
    assert out["PPLRefitSingleOneD"] == MISSING


def test_missing_seed_is_visible(capsys):
    s = summarise(fake_runs(seeds=(0, 2)), {"variant": ["baseline"]}, [0, 1, 2])
    ppl = s.filter(pl.col("metric") == "test_ppl").row(0, named=True)
    assert (ppl["n"], ppl["n_expected"]) == (2, 3)
    assert "('baseline', 1)" in capsys.readouterr().out


def test_formatting_and_escape():
    assert fmt_pm(1234.56, 7.0, 1) == "1{,}234.6 \\ensuremath{\\pm} 7.0"
    assert fmt_pm(5.0, None, 2) == "5.00"
    assert fmt_pm(5.0, math.nan, 2) == "5.00"
    assert tex_escape("10% of a_b & c") == r"10\% of a\_b \& c"


def test_lm_table_matches_golden_file():
    runs = fake_runs()
    rep = LMReport(
        summarise(runs, {"variant": ["baseline"]}, [0, 1, 2]), runs, ["baseline"], unigram_loss=6.0
    )
    label, colspec, header = LM_TABLES["lm_main"]
    table = lm_table("Caption.", label, colspec, header, rep.main_rows())
    tex = make_env(TEMPLATES).get_template("table.tex.j2").render(t=table)
    assert tex == GOLDEN.read_text()


def test_loss_share_and_ratio_of_the_full_model_are_one():
    runs = fake_runs()
    rep = LMReport(
        summarise(runs, {"variant": ["baseline"]}, [0, 1, 2]), runs, ["baseline"], unigram_loss=6.0
    )
    assert rep.share("baseline") == (pytest.approx(1.0), pytest.approx(0.0))
    assert rep.ratio("baseline")[0] == pytest.approx(1.0)


def test_paired_t_test_detects_a_consistent_shift_only():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}
    diffs, p = paired({s: v - 0.5 + 0.01 * s**2 for s, v in a.items()}, a)
    assert all(d < 0 for d in diffs) and p < 0.01
    _, p_noise = paired({0: 1.1, 1: 1.9, 2: 3.1, 3: 3.9}, a)
    assert p_noise > 0.5
    assert paired({0: 1.0}, {0: 2.0})[1] is None  # one seed: no test


def test_template_typo_fails_loudly(tmp_path):
    (tmp_path / "t.tex.j2").write_text(r"\VAR{not_there}")
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        make_env(tmp_path).get_template("t.tex.j2").render()


def test_macros_template_defines_macros():
    env = make_env(TEMPLATES)
    tex = env.get_template("macros.tex.j2").render(macros={"BaselinePPL": "110.0"}, origin="x")
    assert tex.splitlines() == [
        "% Generated by x. Do not edit.",
        r"\newcommand{\BaselinePPL}{110.0}",
    ]


def test_only_the_three_contract_templates_remain():
    assert sorted(p.name for p in TEMPLATES.glob("*.j2")) == [
        "blocks.tex.j2",
        "macros.tex.j2",
        "table.tex.j2",
    ]


def test_table_template_options():
    env = make_env(TEMPLATES)
    rows = [["a", "1"], "midrule", ["b", "2"]]
    tex = env.get_template("table.tex.j2").render(t=Table("Cap.", "tab:x", "lr", ["K", "V"], rows))
    lines = tex.splitlines()
    assert lines[:3] == [r"\begin{table}[tbp]", r"  \centering", r"  \footnotesize"]
    assert r"  \setlength{\tabcolsep}{3pt}" in lines
    assert lines[lines.index("    a & 1 \\\\") + 1] == r"    \midrule"  # the block separator
    custom = Table("C", "tab:y", "l", ["K"], [], placement="t", size="small", tabcolsep="4pt")
    tex = env.get_template("table.tex.j2").render(t=custom)
    assert r"\begin{table}[t]" in tex and r"  \small" in tex and "{4pt}" in tex
    assert r"\multicolumn{1}{c}{no results in this build} \\" in tex  # empty: one spanning row
    silent = Table("C", "tab:y", "l", ["K"], [], empty=None)
    body = env.get_template("table.tex.j2").render(t=silent)
    assert "multicolumn" not in body and body.index(r"\midrule") < body.index(r"\bottomrule")


def test_render_report_writes_tables_long_table_and_macros(tmp_path):
    one = Table("One.", "tab:one", "lr", ["K", "V"], [["a", "1"]])
    blocks = LongTable([one, one], "pillm.test from synthetic data", "No blocks.")
    empty = LongTable([], "pillm.test from synthetic data", "No blocks.")
    files = {tmp_path / "one.tex": one, tmp_path / "b.tex": blocks, tmp_path / "e.tex": empty}
    render_report(files, {"TestN": "3"}, TEMPLATES, tmp_path / "n.tex", "pillm.test", "Test")
    single = (tmp_path / "one.tex").read_text()
    long = (tmp_path / "b.tex").read_text()
    assert long == "% Generated by pillm.test from synthetic data. Do not edit.\n" + 2 * single
    assert (tmp_path / "e.tex").read_text().splitlines()[1] == "No blocks."
    assert r"\newcommand{\TestN}{3}" in (tmp_path / "n.tex").read_text()
    with pytest.raises(ValueError, match="Test2"):
        render_report({}, {"Test2": "x"}, TEMPLATES, tmp_path / "m.tex", "pillm.test", "Test")
    with pytest.raises(ValueError, match="Other"):
        render_report({}, {"Other": "x"}, TEMPLATES, tmp_path / "m.tex", "pillm.test", "Test")


def test_macro_names_spell_numbers():
    assert macro_name("refit_single16d", whole_numbers=True) == "RefitSingleSixteenD"
    assert macro_name("opt-125m") == "OptOneTwoFiveM"
    assert macro_name("mnist", "flow_adamw8", prefix="Gen") == "GenMnistFlowAdamwEight"


def test_lm_report_renders_through_the_contract(tmp_path):
    runs = fake_runs().with_columns(pl.lit("cpu").alias("device_name"))
    summary = tmp_path / "summary"
    summary.mkdir()
    summarise(runs, {"variant": ["baseline"]}, [0, 1, 2]).write_parquet(summary / "lm.parquet")
    runs.write_parquet(summary / "runs.parquet")
    samples = {"variant": ["baseline"], "seed": [0], "prompt": ["The"], "continuation": ["cat"]}
    pl.DataFrame(samples).write_parquet(summary / "samples.parquet")
    pl.DataFrame({"layer": [None]}).write_parquet(summary / "solves.parquet")  # nothing solved
    meta = {"policy": "local:wikitext2:raw v1", "tokenizer": "GPT-2 BPE", "vocab_size": 50257,
            "tokens": {"train": 10, "valid": 2, "test": 3}, "unigram_test_loss": 6.0}  # fmt: skip
    (tmp_path / "tokens.json").write_text(json.dumps(meta))
    params = {"name": "toy", "variants": ["baseline"], "seeds": [0, 1, 2],
              "model": {"n_layer": 2, "d_model": 64, "n_head": 2, "ffn_mult": 2, "context": 32},
              "train": {"epochs": 1, "batch_size": 8, "lr": 1e-3}, "trained_margin": 0.1}  # fmt: skip
    tables = tmp_path / "tables"
    render_tables(str(summary), str(tmp_path / "tokens.json"), params, str(TEMPLATES),
                  str(tables), str(tmp_path / "numbers.tex"))  # fmt: skip
    assert sorted(p.stem for p in tables.glob("*.tex")) == sorted([*LM_TABLES, "lm_solves"])
    assert "No variant of this build solves" in (tables / "lm_solves.tex").read_text()
    main = (tables / "lm_main.tex").read_text()
    # 95 % t interval of (100, 110, 120): t(0.975, 2) * 10 / sqrt(3) = 24.84
    assert main.startswith(r"\begin{table}[t]") and "110.0 \\ensuremath{\\pm} 24.8" in main
    assert "95\\,\\% $t$ interval over 3 seeds" in main
    assert "multicolumn" not in (tables / "lm_features.tex").read_text()  # empty: no rows
    numbers = (tmp_path / "numbers.tex").read_text()
    assert numbers.startswith(
        "% Generated by pillm.lm.report from results/<name>/summary. Do not edit."
    )
    assert r"\newcommand{\PPLBaseline}{110.0 \ensuremath{\pm} 24.8}" in numbers
    assert r"\newcommand{\BaselinePPLStd}{10.0}" in numbers  # ...Std macros keep the std
    assert r"\newcommand{\PilEdgeSelections}{0}" in numbers  # no solving variant: none
    assert r"\newcommand{\KneserNeyPPL}{--}" in numbers  # no n-gram summary in this build
    assert r"\newcommand{\LambadaOovShare}{--}" in numbers
    assert r"\newcommand{\RefitWidthSweep}{This configuration runs no width sweep" in numbers
    assert r"\newcommand{\TrainedMargin}{0.10}" in numbers
    assert r"\newcommand{\FfnMult}{2}" in numbers  # model.ffn_mult, and what follows from it
    assert r"\newcommand{\FfnWeightShare}{half}" in numbers
    assert r"\newcommand{\FeatWidthRefitSingleEightD}{8d}" in numbers  # every refit's map
    assert r"\newcommand{\RefitSweepRange}{--}" in numbers  # no single-projection refit ran


def test_fmt_num_signs_and_separators():
    from pillm.paper.latex import fmt_num

    assert fmt_num(-1234.56, 1) == "\\ensuremath{-}1{,}234.6"
    assert fmt_num(-1e-8, 4) == "0.0000"  # rounds to zero: no minus sign
    assert "$" not in fmt_num(-0.5)  # a macro may sit inside math ($d^{\\ScalCost...}$)
    assert fmt_num(None) == fmt_num(float("nan")) == "--"


def test_gpu_rerun_sentence_follows_the_config():
    """The appendix says what this build's train.deterministic did, not a fixed claim."""
    from pillm.lm.macros import gpu_determinism

    on, off = gpu_determinism(True), gpu_determinism(False)
    assert "deterministic kernels" in on and "identical weights" in on
    assert "default kernels" in off and "is off" in off and "identical" not in off
    key = r"\texttt{train.\allowbreak{}deterministic}"
    assert key in on and key in off
    assert all("SAFFU" in text and "either way" in text for text in (on, off))  # not switched
