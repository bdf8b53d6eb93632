"""Provenance on the first page and the isolated timing record: clean and dirty record sets
render the right sentence, the macro file compiles, and the newest benchmark record is the one
the paper quotes."""

import json
import re
import shutil
import subprocess

import polars as pl
import pytest

import pillm.core.records
from pillm.paper import build
from pillm.paper.build import (
    provenance_macros,
    run_provenance,
    timing_macros,
    write_provenance,
    write_timing,
)

from ..conftest import REPO

TEMPLATES = str(REPO / "paper/templates")
CPU = "CPU (x86_64, 2 threads)"


def lm_runs(path, revs, device=CPU):
    """A tidy runs summary: two metric rows per (variant, seed) run, one revision per run."""
    rows = [
        {"experiment": "lm", "variant": "baseline", "seed": seed, "metric": m, "value": 1.0,
         "git_rev": rev, "device_name": device}
        for seed, rev in enumerate(revs)
        for m in ("test_loss", "val_loss")
    ]  # fmt: skip
    pl.DataFrame(rows).write_parquet(path)
    return str(path)


def test_clean_runs_and_build_give_no_sentence(tmp_path):
    runs = run_provenance([lm_runs(tmp_path / "runs.parquet", ["abc123"] * 3)])
    assert len(runs) == 3  # two metric rows per run count once
    m = provenance_macros("abc123", runs)
    assert m["BuildDirty"] == ""
    assert m["BuildRevision"] == "\\texttt{abc123}"
    assert m["BuildRuns"] == "3 runs (revision \\texttt{abc123})"
    assert m["BuildDevices"] == "CPU (x86\\_64, 2 threads)"


def test_dirty_runs_are_counted_in_the_sentence(tmp_path):
    revs = ["abc123", "abc123-dirty", "abc123-dirty", "def456"]
    runs = run_provenance([lm_runs(tmp_path / "runs.parquet", revs)])
    m = provenance_macros("abc123", runs)
    assert m["BuildDirty"].startswith("2 of 4 runs came from a modified working tree")
    assert "\\texttt{def456}" in m["BuildRuns"] and "dirty" not in m["BuildRuns"]


def test_a_dirty_build_and_runs_without_revision_are_stated(tmp_path):
    probe = tmp_path / "probe_jobs.parquet"  # a summary that records no git_rev
    pl.DataFrame({"model": ["minilm", "gpt2"], "corpus": ["ptb", "ptb"]}).write_parquet(probe)
    gpu = lm_runs(tmp_path / "runs.parquet", ["abc123"], device="NVIDIA H100 80GB HBM3")
    m = provenance_macros("abc123-dirty", run_provenance([gpu, str(probe)]))
    assert m["BuildDirty"] == (
        "This paper was built from a modified working tree. 2 of 3 runs recorded no code revision."
    )
    assert m["BuildDevices"] == "NVIDIA H100 80GB HBM3"
    assert m["BuildRevision"] == "\\texttt{abc123-dirty}"


def test_a_file_without_run_columns_is_refused(tmp_path):
    path = tmp_path / "x.parquet"
    pl.DataFrame({"mean": [1.0]}).write_parquet(path)
    with pytest.raises(ValueError, match="no run identity columns"):
        run_provenance([str(path)])


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="needs pdflatex (TeX Live)")
def test_provenance_file_compiles_with_the_first_page_line(tmp_path, monkeypatch):
    monkeypatch.setattr(pillm.core.records, "git_revision", lambda: "0123abcd-dirty")
    out = tmp_path / "provenance.tex"
    runs = lm_runs(tmp_path / "runs.parquet", ["0123abcd", "0123abcd-dirty"])
    write_provenance([runs], TEMPLATES, str(out))
    text = out.read_text()
    assert "{This paper was built from a modified working tree. 1 of 2 runs came" in text
    # the \date line of paper/main.tex, as it stands
    date = re.search(r"\\date\{(.*?)\}\n", (REPO / "paper/main.tex").read_text(), re.S).group(1)
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\\input{provenance.tex}\\title{t}\\date{"
        + date
        + "}\\begin{document}\\maketitle\\end{document}\n"
    )
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    pdftotext = shutil.which("pdftotext")
    if pdftotext:
        page = subprocess.run([pdftotext, "doc.pdf", "-"], cwd=tmp_path, capture_output=True)
        assert b"modified working tree" in page.stdout


def timing_row(solve, grad, alone=True):
    """One row of the ``scaling-cost`` record the rule solve_timing writes."""
    return {
        "device_name": "NVIDIA H200", "torch": "2.11.0+cu130", "repeats": 3, "alone": alone,
        "d_model": 256, "n_layer": 4, "context": 128, "epochs": 5, "train_tokens_split": 232361,
        "solve_s": sorted(solve)[1], "solve_s_min": min(solve), "solve_s_max": max(solve),
        "adamw_s": sorted(grad)[1], "adamw_s_min": min(grad), "adamw_s_max": max(grad),
    }  # fmt: skip


def test_the_builds_timing_is_rendered_with_its_device(tmp_path):
    m = timing_macros(timing_row([1.0, 1.2, 1.5], [3.0, 3.3, 4.0]))
    assert (m["TimingSolveS"], m["TimingGradS"], m["TimingRatio"]) == ("1.20", "3.30", "2.8")
    assert m["TimingSolveRange"] == "1.00--1.50" and m["TimingEpochs"] == "5"
    assert "232{,}361 train tokens" in m["TimingShape"]
    assert "AdamW for 5 epochs took 3.30~s" in m["TimingSentence"]
    one = timing_macros({**timing_row([1.0, 1.2, 1.5], [3.0, 3.3, 4.0]), "epochs": 1})
    assert "AdamW for 1 epoch took" in one["TimingSentence"]
    assert (
        "In a job of this build on NVIDIA H200 with no other job on the device"
        in (m["TimingSentence"])
    )
    record = tmp_path / "solve_timing.json"
    record.write_text(json.dumps([timing_row([1.0, 1.2, 1.5], [3.0, 3.3, 4.0])]))
    out = tmp_path / "timing_numbers.tex"
    write_timing(str(record), TEMPLATES, str(out))
    assert "\\newcommand{\\TimingDevice}{NVIDIA H200}" in out.read_text()


def test_a_timing_beside_other_jobs_says_so():
    m = timing_macros(timing_row([1.0, 1.2, 1.5], [3.0, 3.3, 4.0], alone=False))
    assert "beside its other jobs (so the figures are noisy)" in m["TimingSentence"]
    assert "no other job" not in m["TimingSentence"]


def test_a_run_counts_once_whatever_its_rows(tmp_path):
    """The run columns cover every identity column a run record carries (core.records.IDENTITY):
    a run's metric rows count once, and runs that differ in any of them count apart."""
    assert set(pillm.core.records.IDENTITY) <= set(build.RUN_KEYS)
    rows = [{"experiment": "scaling", "variant": "baseline", "point": point, "seed": 0,
             "corpus": corpus, "metric": m, "value": 1.0, "git_rev": "abc", "device_name": CPU}
            for point in ("d128_L4_f100", "d256_L4_f100") for corpus in ("ptb", "wikitext2")
            for m in ("test_loss", "val_loss")]  # fmt: skip
    path = tmp_path / "runs.parquet"
    pl.DataFrame(rows).write_parquet(path)
    assert len(run_provenance([str(path)])) == 4


def test_a_revision_sent_with_the_tree_overrides_the_local_git(monkeypatch):
    from pillm.core.records import git_revision

    monkeypatch.setenv("PILLM_GIT_REV", "76689b7aa1b2")
    assert git_revision() == "76689b7aa1b2"
    monkeypatch.delenv("PILLM_GIT_REV")
    assert git_revision() != "76689b7aa1b2"  # read from git again


def test_one_spelling_per_cpu_device():
    from pillm.core.records import cpu_name

    assert cpu_name(1).endswith(", 1 thread)") and cpu_name(2).endswith(", 2 threads)")
    runs = [{"git_rev": "abc", "device_name": d} for d in
            ("CPU (x86_64, 1 threads)", "CPU (x86_64, 1 thread)", "CPU (x86_64, 2 threads)")]  # fmt: skip
    assert provenance_macros("abc", runs)["BuildDevices"] == (
        "CPU (x86\\_64, 1 thread), CPU (x86\\_64, 2 threads)"  # TeX-escaped
    )
