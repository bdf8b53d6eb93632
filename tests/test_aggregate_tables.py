import math
from pathlib import Path

import polars as pl
import pytest

from pillm.aggregate import summarise
from pillm.tables import fmt_pm, lm_rows, make_env, tex_escape

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "lm_main.tex"
METRICS = {
    "test_ppl": [100.0, 110.0, 120.0],
    "test_acc": [0.20, 0.21, 0.22],
    "test_bpb": [1.5, 1.6, 1.7],
    "train_time_s": [10.0, 12.0, 14.0],
    "params_total": [3.2e6] * 3,
    "params_trainable": [3.2e6] * 3,
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
    s = summarise(fake_runs(), ["baseline"], [0, 1, 2])
    env = make_env(REPO / "paper" / "templates")
    tex = env.get_template("lm_main.tex.j2").render(
        rows=lm_rows(s, ["baseline"]), policy="offline mirror", tokenizer="GPT-2 BPE"
    )
    assert tex == GOLDEN.read_text()


def test_template_typo_fails_loudly(tmp_path):
    (tmp_path / "t.tex.j2").write_text(r"\VAR{not_there}")
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        make_env(tmp_path).get_template("t.tex.j2").render()


def test_numbers_template_defines_macros():
    env = make_env(REPO / "paper" / "templates")
    tex = env.get_template("numbers.tex.j2").render(macros={"BaselinePPL": "110.0"})
    assert r"\newcommand{\BaselinePPL}{110.0}" in tex
