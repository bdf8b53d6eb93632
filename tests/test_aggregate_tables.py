import math
from pathlib import Path

import polars as pl
import pytest

from pillm.lm.report import LM_TABLES, LMReport, paired
from pillm.paper.latex import fmt_pm, make_env, tex_escape
from pillm.paper.tidy import summarise

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "lm_main.tex"
METRICS = {
    "test_ppl": [100.0, 110.0, 120.0],
    "test_acc": [0.20, 0.21, 0.22],
    "test_bpb": [1.5, 1.6, 1.7],
    "train_time_s": [10.0, 12.0, 14.0],
    "test_loss": [4.6, 4.7, 4.8],
    "params_total": [3.2e6] * 3,
    "params_trainable": [3.2e6] * 3,
    "params_solved": [0.0] * 3,
    "grad_time_s": [10.0, 12.0, 14.0],
    "solve_time_s": [0.0] * 3,
    "lambada_acc": [0.05, 0.06, 0.07],
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
    s = summarise(fake_runs(), ["baseline"], [0, 1, 2])
    ppl = s.filter(pl.col("metric") == "test_ppl").row(0, named=True)
    assert ppl["mean"] == pytest.approx(110.0)
    assert ppl["std"] == pytest.approx(10.0)  # sample std, ddof = 1
    assert (ppl["n"], ppl["n_expected"]) == (3, 3)


def test_missing_seed_is_visible(capsys):
    s = summarise(fake_runs(seeds=(0, 2)), ["baseline"], [0, 1, 2])
    ppl = s.filter(pl.col("metric") == "test_ppl").row(0, named=True)
    assert (ppl["n"], ppl["n_expected"]) == (2, 3)
    assert "('baseline', 1)" in capsys.readouterr().out


def test_formatting_and_escape():
    assert fmt_pm(1234.56, 7.0, 1) == "1{,}234.6 $\\pm$ 7.0"
    assert fmt_pm(5.0, None, 2) == "5.00"
    assert fmt_pm(5.0, math.nan, 2) == "5.00"
    assert tex_escape("10% of a_b & c") == r"10\% of a\_b \& c"


def test_lm_table_matches_golden_file():
    runs = fake_runs()
    rep = LMReport(summarise(runs, ["baseline"], [0, 1, 2]), runs, ["baseline"], unigram_loss=6.0)
    label, colspec, header = LM_TABLES["lm_main"]
    env = make_env(REPO / "paper" / "templates")
    tex = env.get_template("table.tex.j2").render(
        caption="Caption.", label=label, colspec=colspec, header=header, rows=rep.main_rows()
    )
    assert tex == GOLDEN.read_text()


def test_loss_share_and_ratio_of_the_full_model_are_one():
    runs = fake_runs()
    rep = LMReport(summarise(runs, ["baseline"], [0, 1, 2]), runs, ["baseline"], unigram_loss=6.0)
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


def test_numbers_template_defines_macros():
    env = make_env(REPO / "paper" / "templates")
    tex = env.get_template("numbers.tex.j2").render(macros={"BaselinePPL": "110.0"})
    assert r"\newcommand{\BaselinePPL}{110.0}" in tex


def test_fmt_num_signs_and_separators():
    from pillm.paper.latex import fmt_num

    assert fmt_num(-1234.56, 1) == "$-$1{,}234.6"
    assert fmt_num(-1e-8, 4) == "0.0000"  # rounds to zero: no minus sign
    assert fmt_num(None) == fmt_num(float("nan")) == "--"
