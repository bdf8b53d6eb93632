"""``pillm diff``: two synthetic builds, each difference planted by hand and found (or not)."""

import subprocess
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest

from pillm.cli import main
from pillm.paper.claims import Result
from pillm.paper.diff import diff_builds
from pillm.paper.diff.builds import DiffInputError, FolderBuild, open_build
from pillm.paper.diff.keys import NOT_COMPARED, SUMMARY_KEYS
from pillm.paper.diff.render import render_html, render_text
from pillm.paper.diff.texcells import macro_values, table_cells
from pillm.paper.report import render_report
from pillm.paper.table import Table

REPO = Path(__file__).resolve().parents[2]
# The summaries of a recorded paper build (GPU, 3-5 seeds): every study's summary file.
PAPER_BUILD = REPO / "tests" / "data" / "paper_build_summary"
TEMPLATES = REPO / "paper" / "templates"
TOKENIZER = "BPE-512 (trained on train split)"


def lm_summary(cells: dict[tuple[str, str], tuple[float, float | None, int]], tokenizer=TOKENIZER):
    """An lm.parquet-shaped summary: {(variant, metric): (mean, std, n)}."""
    rows = [
        {
            "experiment": "lm",
            "variant": v,
            "corpus": "wikitext2",
            "tokenizer": tokenizer,
            "data_policy": "local",
            "metric": m,
            "mean": mean,
            "std": std,
            "n": n,
            "seeds": list(range(n)),
            "n_expected": n,
        }
        for (v, m), (mean, std, n) in cells.items()
    ]
    return pl.DataFrame(rows, schema_overrides={"n": pl.UInt32, "n_expected": pl.Int32})


def build(root: Path, summaries: dict[str, pl.DataFrame], tables=None, macros=None) -> Path:
    (root / "summary").mkdir(parents=True)
    for name, df in summaries.items():
        df.write_parquet(root / "summary" / name)
    if tables is not None or macros is not None:
        gen = root / "paper" / "generated"
        render_report(
            {gen / "tables" / name: t for name, t in (tables or {}).items()},
            macros or {},
            TEMPLATES,
            gen / "numbers.tex",
            origin="tests",
        )
    return root


def kinds(d, section):
    return [(c.where, c.what, c.kind) for c in d.section(section)]


BASE = {
    ("baseline", "test_ppl"): (100.0, 2.0, 3),
    ("attn_only", "test_ppl"): (150.0, 3.0, 3),
    ("baseline", "train_time_s"): (10.0, 0.1, 3),
}


def test_identical_builds_list_nothing(tmp_path):
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    d = diff_builds(FolderBuild(a), FolderBuild(a))
    assert d.changes == []
    assert "none" in render_text(d)


def test_within_noise_is_not_listed_and_beyond_noise_is(tmp_path):
    # SE of the difference for std 2, n 3 on both sides: sqrt(2 * 4 / 3) = 1.63; 2 SE = 3.27.
    moved = {
        **BASE,
        ("baseline", "test_ppl"): (103.0, 2.0, 3),  # 1.8 SE: noise
        ("attn_only", "test_ppl"): (160.0, 3.0, 3),
    }  # 10 / 2.45 = 4.1 SE: listed
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(moved)})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "metrics") == [("lm.parquet [variant=attn_only]", "test_ppl", "noise")]
    assert "4.1 x its standard error (Welch p=0.015)" in d.section("metrics")[0].note
    # Three metrics with noise, each passing 2 SE by chance with P(|t_4| > 2) = 0.116.
    assert "3 metrics had seed noise on both sides; if none had changed, about 0.3" in render_text(
        d
    )
    # A wider rule (5 SE) lists nothing.
    assert diff_builds(FolderBuild(a), FolderBuild(b), sigmas=5).section("metrics") == []


def test_summary_statistics_columns_are_not_part_of_the_item(tmp_path):
    # tidy.summarise adds ci95 (a float per row): it must not split an item in two.
    ci = lm_summary(BASE).with_columns((pl.col("std") * 2.5).alias("ci95"))
    wider = lm_summary(BASE).with_columns((pl.col("std") * 3.0).alias("ci95"))
    a = build(tmp_path / "a", {"lm.parquet": ci})
    b = build(tmp_path / "b", {"lm.parquet": wider})
    assert diff_builds(FolderBuild(a), FolderBuild(b)).changes == []


def test_one_seed_is_flagged_no_seed_noise_known(tmp_path):
    one = {("baseline", "test_ppl"): (100.0, None, 1), ("attn_only", "test_ppl"): (150.0, None, 1)}
    moved = {
        ("baseline", "test_ppl"): (100.5, None, 1),
        ("attn_only", "test_ppl"): (165.0, None, 1),
    }
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(one)})
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(moved)})
    d = diff_builds(FolderBuild(a), FolderBuild(b), rel=0.01)  # 0.5 % is below, 10 % above
    assert kinds(d, "metrics") == [("lm.parquet [variant=attn_only]", "test_ppl", "no_noise")]
    assert "NO SEED NOISE KNOWN" in render_text(d)
    assert "+10.0%" in d.section("metrics")[0].note


def test_costs_are_listed_apart_from_metrics(tmp_path):
    slow = {**BASE, ("baseline", "train_time_s"): (20.0, 0.1, 3)}
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(slow)})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert d.section("metrics") == []
    assert kinds(d, "cost") == [("lm.parquet [variant=baseline]", "train_time_s", "noise")]


def test_wide_summary_pools_seeds_of_one_item(tmp_path):
    def lora(acc_s):
        return pl.DataFrame(
            {
                "model": [f"pillm-s{s}" for s in range(3)],
                "model_group": ["pillm"] * 3,
                "method": ["ridge"] * 3,
                "seed": [0, 1, 2],
                "device": ["cpu"] * 3,
                "accuracy": acc_s,
            }
        )

    a = build(tmp_path / "a", {"lora.parquet": lora([0.60, 0.62, 0.61])})
    b = build(tmp_path / "b", {"lora.parquet": lora([0.61, 0.63, 0.60])})  # same spread
    c = build(tmp_path / "c", {"lora.parquet": lora([0.70, 0.71, 0.72])})
    assert diff_builds(FolderBuild(a), FolderBuild(b)).changes == []
    d = diff_builds(FolderBuild(a), FolderBuild(c))
    assert kinds(d, "metrics") == [
        ("lora.parquet [model_group=pillm; method=ridge]", "accuracy", "noise")
    ]
    assert "(n=3)" in d.section("metrics")[0].a


def test_new_tokenizer_is_one_context_change_not_every_metric(tmp_path):
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(BASE, tokenizer="GPT-2 BPE")})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "context") == [("lm.parquet", "tokenizer", "context")]
    assert d.section("metrics") == [] and d.section("cost") == []


def test_item_on_one_side_is_one_line(tmp_path):
    more = {
        **BASE,
        ("ffn_only", "test_ppl"): (120.0, 1.0, 3),
        ("ffn_only", "test_acc"): (0.1, 0, 3),
    }
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(more)})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "metrics") == [
        ("lm.parquet [variant=ffn_only]", "test_acc, test_ppl", "only_b")
    ]


def claims(verdicts: dict[str, str], long_names: bool = False) -> pl.DataFrame:
    """claims.parquet as pillm.paper.claims writes it, or with the long column names."""
    rows = [
        asdict(
            Result(
                id=k,
                study="lm",
                metric="test_ppl",
                test="direction",
                a="ffn_only",
                b="attn_only",
                better="lower",
                verdict=v,
                n=3,
                diff=-3.0,
                ci_lo=-5.0,
                ci_hi=-1.0,
                agree=3,
            )
        )
        for k, v in verdicts.items()
    ]
    df = pl.DataFrame(rows, infer_schema_length=None)
    names = {"id": "claim_id", "diff": "diff_mean", "ci_lo": "ci_low", "ci_hi": "ci_high"}
    return df.rename(names) if long_names else df


def test_flipped_claim_is_listed_and_missing_claims_are_a_note(tmp_path):
    lm = lm_summary(BASE)
    a = build(
        tmp_path / "a",
        {
            "lm.parquet": lm,
            "claims.parquet": claims(
                {"ffn_beats_attn": "holds", "pil_matches": "holds", "gone": "holds"}
            ),
        },
    )
    b = build(
        tmp_path / "b",
        {
            "lm.parquet": lm,
            "claims.parquet": claims(
                {"ffn_beats_attn": "indistinguishable at 3 seeds", "pil_matches": "holds"},
                long_names=True,
            ),
        },
    )
    c = build(tmp_path / "c", {"lm.parquet": lm})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "claims") == [
        ("claims.parquet", "ffn_beats_attn", "flip"),
        ("claims.parquet", "gone", "only_a"),
    ]
    assert d.section("claims")[0].a == "holds, Δ=-3, CI [-5, -1], 3/3 seeds"
    d = diff_builds(FolderBuild(a), FolderBuild(c))
    assert d.changes == []
    assert any("claims.parquet" in n and "missing in build B" in n for n in d.notes)


def test_claims_without_verdict_column_name_the_file(tmp_path):
    lm = lm_summary(BASE)
    a = build(tmp_path / "a", {"lm.parquet": lm, "claims.parquet": claims({"x": "holds"})})
    b = build(
        tmp_path / "b", {"lm.parquet": lm, "claims.parquet": pl.DataFrame({"claim_id": ["x"]})}
    )
    with pytest.raises(
        DiffInputError, match=r"claims.parquet of build B lacks columns \['verdict'\]"
    ):
        diff_builds(FolderBuild(a), FolderBuild(b))


def lora_table(acc: str) -> Table:
    return Table(
        caption="SST-2",
        label="tab:lora",
        colspec="llrr",
        header=["Model", "Method", "Acc.", "$n$"],
        rows=[
            ["pillm", "PIL-LoRA", "51.9", "3"],
            ["", "LoRA", acc, "3"],
            "midrule",
            ["MiniLM", "LoRA", acc, "1"],
        ],
    )


def test_moved_table_cell_and_macro_are_listed(tmp_path):
    lm = {"lm.parquet": lm_summary(BASE)}
    a = build(tmp_path / "a", lm, {"lora.tex": lora_table("49.7")}, {"LoraAcc": "49.7"})
    b = build(tmp_path / "b", lm, {"lora.tex": lora_table("50.2")}, {"LoraAcc": "50.2"})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "tables") == [
        ("lora.tex [tab:lora]", "pillm / LoRA | Acc.", "cell"),  # the blank Model continues
        ("lora.tex [tab:lora]", "MiniLM / LoRA | Acc.", "cell"),
    ]
    assert kinds(d, "macros") == [("numbers.tex", "\\LoraAcc", "macro")]
    page = render_html(d)
    assert "<tr class='cell'>" in page and "<td class='b'>50.2</td>" in page


def test_missing_summary_on_one_side_is_reported_not_a_crash(tmp_path):
    a = build(
        tmp_path / "a",
        {
            "lm.parquet": lm_summary(BASE),
            "lora.parquet": pl.DataFrame(
                {"model_group": ["x"], "method": ["ridge"], "accuracy": [0.5]}
            ),
        },
    )
    b = build(tmp_path / "b", {"lm.parquet": lm_summary(BASE)})
    empty = tmp_path / "empty"
    empty.mkdir()
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert d.changes == [] and "summary/lora.parquet missing in build B: not compared" in d.notes
    d = diff_builds(FolderBuild(a), FolderBuild(empty))
    assert any("has no summary/*.parquet" in n for n in d.notes)
    assert "Not compared:" in render_text(d)


def test_git_revision_build_reads_the_recorded_summaries(tmp_path):
    repo = tmp_path / "repo"
    build(repo / "runs" / "r1", {"lm.parquet": lm_summary(BASE)})
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "r1"], check=True)
    moved = build(
        tmp_path / "b",
        {"lm.parquet": lm_summary({**BASE, ("baseline", "test_ppl"): (130.0, 2.0, 3)})},
    )
    rec = open_build("HEAD:runs/r1", repo)
    assert diff_builds(rec, open_build(str(repo / "runs" / "r1"))).changes == []
    assert kinds(diff_builds(rec, FolderBuild(moved)), "metrics") == [
        ("lm.parquet [variant=baseline]", "test_ppl", "noise")
    ]
    with pytest.raises(DiffInputError, match="no files under 'runs/r2'"):
        open_build("HEAD:runs/r2", repo)


def test_cli_prints_writes_html_and_refuses_a_bad_build(tmp_path, capsys):
    a = build(tmp_path / "a", {"lm.parquet": lm_summary(BASE)})
    b = build(
        tmp_path / "b",
        {"lm.parquet": lm_summary({**BASE, ("attn_only", "test_ppl"): (190.0, 3.0, 3)})},
    )
    out = tmp_path / "diff.html"
    assert main(["diff", str(a), str(b), "--html", str(out)]) == 0
    assert "[beyond noise] lm.parquet [variant=attn_only] test_ppl" in capsys.readouterr().out
    assert "<tr class='noise'>" in out.read_text()
    assert main(["diff", str(a), str(tmp_path / "nope")]) == 2
    assert "neither a folder nor REV:PATH" in capsys.readouterr().err
    out = tmp_path / "written"  # a revision that git would read as an option
    assert main(["diff", str(a), "--", f"--output={out}:results"]) == 2
    assert "neither a folder nor REV:PATH" in capsys.readouterr().err and not out.exists()


def test_table_cells_read_what_latex_writes():
    tex = (
        "\\label{tab:t}\\begin{tabular}{@{}rlr@{}}\\toprule\n"
        "Block & \\shortstack{Solver\\\\{}name} & R \\& S \\\\\n\\midrule\n"
        "0 & eigh & 0.9 \\\\[2pt]\n1 & chol & \\multicolumn{1}{c}{--} \\\\\n\\bottomrule\\end{tabular}"
    )
    cells = table_cells(tex)
    assert cells[("tab:t", "0", "R \\& S")] == "0.9"
    assert cells[("tab:t", "1", "\\shortstack{Solver\\\\{}name}")] == "chol"
    assert len(cells) == 6
    assert macro_values("\\newcommand{\\PplBase}{116.8}\n% x\n") == {"PplBase": "116.8"}


def test_rows_and_macros_one_build_lacks_are_one_line_each(tmp_path):
    lm = {"lm.parquet": lm_summary(BASE)}
    grown = Table(
        **{
            **lora_table("49.7").__dict__,
            "rows": [*lora_table("49.7").rows, ["New", "LoRA", "1", "1"]],
        }
    )
    macros = {f"Claim{x}": "1" for x in "ABCDE"}
    a = build(tmp_path / "a", lm, {"lora.tex": lora_table("49.7")}, {"LoraAcc": "49.7"})
    b = build(tmp_path / "b", lm, {"lora.tex": grown}, {"LoraAcc": "49.7", **macros})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "tables") == [("lora.tex [tab:lora]", "row New / LoRA (4 cells)", "only_b")]
    assert kinds(d, "macros") == [("numbers.tex", "5 macros", "only_b")]
    assert d.section("tables")[0].b == "present"


def test_every_summary_of_the_paper_build_has_declared_item_keys():
    """Every summary is compared by its declared keys (or declared not compared)."""
    summaries = sorted(PAPER_BUILD.glob("*.parquet"))
    assert summaries
    for path in summaries:
        assert path.name in SUMMARY_KEYS or path.name in NOT_COMPARED, path.name
        columns = set(pl.read_parquet_schema(path))
        keys = SUMMARY_KEYS.get(path.name)
        if keys is not None:
            assert set(keys.item) | set(keys.replicates) <= columns, path.name


def test_paper_build_diffed_with_itself_lists_nothing():
    d = diff_builds(FolderBuild(PAPER_BUILD), FolderBuild(PAPER_BUILD))
    assert d.changes == []
    assert [n for n in d.notes if "summary" in n] == []  # every summary was compared


def saffu_summary(ppl: dict[float, float]) -> pl.DataFrame:
    """A saffu.parquet-shaped summary: one variant at several data fractions (a float key)."""
    rows = [
        {"variant": "cat", "init": "explicit", "fraction": f, "agg": "cat", "block": 8,
         "radius": 2, "corpus": "wikitext2", "metric": "test_ppl", "mean": mean, "std": 1.0,
         "n": 3, "ci95": 2.5}
        for f, mean in ppl.items()
    ]  # fmt: skip
    return pl.DataFrame(rows, schema_overrides={"n": pl.UInt32})


def test_float_key_column_keeps_items_apart(tmp_path):
    fractions = {0.1: 65.0, 1.0: 46.0}
    a = build(tmp_path / "a", {"saffu.parquet": saffu_summary(fractions)})
    assert diff_builds(FolderBuild(a), FolderBuild(a)).changes == []
    b = build(tmp_path / "b", {"saffu.parquet": saffu_summary({**fractions, 1.0: 56.0})})
    d = diff_builds(FolderBuild(a), FolderBuild(b))
    assert kinds(d, "metrics") == [("saffu.parquet [fraction=1.0]", "test_ppl", "noise")]


def test_a_key_on_two_rows_stops_naming_file_and_key(tmp_path):
    twice = pl.concat([saffu_summary({0.1: 65.0}), saffu_summary({0.1: 66.0})])
    a = build(tmp_path / "a", {"saffu.parquet": saffu_summary({0.1: 65.0})})
    b = build(tmp_path / "b", {"saffu.parquet": twice})
    with pytest.raises(DiffInputError, match=r"saffu.parquet of build B: 2 rows share") as err:
        diff_builds(FolderBuild(a), FolderBuild(b))
    assert "fraction=0.1" in str(err.value) and "metric=test_ppl" in str(err.value)


def test_a_seed_on_two_rows_of_a_wide_summary_stops(tmp_path):
    rows = pl.DataFrame({"model": ["pillm-s0", "pillm-s0"], "model_group": ["pillm"] * 2,
                         "method": ["ridge"] * 2, "accuracy": [0.6, 0.7]})  # fmt: skip
    a = build(tmp_path / "a", {"lora.parquet": rows})
    with pytest.raises(DiffInputError, match=r"summary/lora.parquet of build A: .*model=pillm-s0"):
        diff_builds(FolderBuild(a), FolderBuild(a))


def test_a_claim_id_on_two_rows_stops(tmp_path):
    twice = pl.concat([claims({"x": "holds"}), claims({"x": "holds"})])
    a = build(tmp_path / "a", {"claims.parquet": twice})
    with pytest.raises(DiffInputError, match=r"claims.parquet of build A: 2 rows .*claim_id=x"):
        diff_builds(FolderBuild(a), FolderBuild(a))


def test_summary_without_declared_keys_is_a_note(tmp_path):
    a = build(tmp_path / "a", {"new_study.parquet": pl.DataFrame({"x": ["a"], "acc": [0.5]})})
    d = diff_builds(FolderBuild(a), FolderBuild(a))
    assert d.changes == []
    assert any("summary/new_study.parquet: no item keys" in n for n in d.notes)
