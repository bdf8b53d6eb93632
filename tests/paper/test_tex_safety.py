"""Strings that reach LaTeX are text: a generated sample holding TeX commands is printed as
typed, never run; a generated file holding one unescaped stops the build; TeX runs without
shell escape."""

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from pillm.lm.report import sample_rows
from pillm.paper import build
from pillm.paper.latex import UnsafeTex, check_tex, tex_escape, unsafe_tex
from pillm.paper.report import render_report
from pillm.paper.table import Table

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "paper" / "templates"
INPUT, SHELL = r"\input{/etc/passwd}", r"\write18{touch pwned}"


def render_samples(folder: Path) -> Path:
    """The LM samples table, as the lm-tables job renders it, of one hostile continuation."""
    samples = pl.DataFrame(
        {
            "variant": ["baseline"],
            "seed": [0],
            "prompt": [f"The history of {INPUT}"],
            "continuation": [f" {SHELL} then {INPUT} & 100% $x$ #1 ~ ^ _"],
        }
    )
    table = Table("Samples.", "tab:samples", "lp{0.62\\linewidth}", ["Model", "Text"],
                  sample_rows(samples, ["baseline"]))  # fmt: skip
    out = folder / "lm_samples.tex"
    render_report({out: table}, {"LmModel": tex_escape(INPUT)}, TEMPLATES, folder / "n.tex", "t")
    return out


def test_a_generated_sample_is_printed_literally(tmp_path):
    tex = render_samples(tmp_path).read_text()
    assert r"\textbackslash{}input\{/etc/passwd\}" in tex
    assert r"\textbackslash{}write18\{touch pwned\}" in tex
    assert INPUT not in tex and SHELL not in tex and unsafe_tex(tex) == []
    assert r"\textbackslash{}input\{/etc/passwd\}" in (tmp_path / "n.tex").read_text()


def test_an_unescaped_string_stops_the_render_and_the_build(tmp_path, monkeypatch):
    with pytest.raises(UnsafeTex, match=r"x\.tex: generated LaTeX holds \\input, \\write"):
        check_tex(f"a {INPUT} b {SHELL}", "x.tex")
    assert unsafe_tex(r"row \\ \textbf{x} \\readme") == []  # \\ is a line break, not \read
    assert unsafe_tex(r"^^5cinput{x}") == ["^^"]
    with pytest.raises(UnsafeTex, match="lm_samples.tex"):
        render_report({tmp_path / "lm_samples.tex": Table("c", "l", "l", ["h"], [[INPUT]])},
                      {}, TEMPLATES, tmp_path / "n.tex", "t")  # fmt: skip
    assert not (tmp_path / "lm_samples.tex").exists()
    paper = tmp_path / "paper"
    shutil.copytree(REPO / "paper", paper, ignore=shutil.ignore_patterns("generated"))
    (paper / "generated" / "tables").mkdir(parents=True)
    (paper / "generated" / "tables" / "bad.tex").write_text(f"{SHELL}\n")
    ran = []
    monkeypatch.setattr(build, "latexmk", lambda *a, **k: ran.append(a))
    with pytest.raises(UnsafeTex, match=r"generated/tables/bad\.tex: .*\\write"):
        build.build_pdf(str(paper), str(tmp_path / "build"), str(tmp_path / "main.pdf"))
    assert ran == []  # TeX never saw it


def test_tex_runs_without_shell_escape(tmp_path, monkeypatch):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(build.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(build.subprocess, "run", run)
    build.latexmk(tmp_path)
    assert calls[0][0] == "latexmk" and "-no-shell-escape" in calls[0]


@pytest.mark.skipif(not (shutil.which("pdflatex")), reason="needs pdflatex (TeX Live)")
def test_the_pdf_prints_the_sample_and_runs_nothing(tmp_path):
    render_samples(tmp_path)
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{lmodern}"
        "\\usepackage{booktabs,array}\\begin{document}\\input{lm_samples.tex}\\end{document}\n"
    )
    proc = subprocess.run(
        ["pdflatex", build.NO_SHELL, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert not (tmp_path / "pwned").exists()
    if not shutil.which("pdftotext"):
        pytest.skip("the PDF's text needs pdftotext (poppler-utils)")
    text = subprocess.run(["pdftotext", "doc.pdf", "-"], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    flat = "".join(text.split())
    assert INPUT.replace(" ", "") in flat and SHELL.replace(" ", "") in flat
