"""Tables fit the text width: no column runs off the page.

Three checks, from the cheapest:
- every generated table the sections input goes through ``\\fitwidetables`` (main.tex), which
  scales a tabular wider than the line down to it;
- a width estimate from the generated ``.tex`` (column widths from the longest cell of each
  column at the table's font size, plus the column gaps, against the text width): a table must
  fit, or need a scale no smaller than ``MIN_SCALE`` to fit (below it the text is unreadable);
  it runs on the tables this repository's tests can render and on a build's tables when one
  is present;
- the LaTeX log of a real build, where one exists: no ``Overfull \\hbox`` inside a generated
  table file (skipped with the reason otherwise: it needs TeX and a finished build).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pillm.paper.latex import make_env
from pillm.paper.table import Table

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = sorted((ROOT / "paper" / "sections").glob("*.tex"))
TEXT_WIDTH_PT = 469.75  # article 10pt, letter paper, geometry margin=1in: 8.5in - 2in
MIN_SCALE = 0.6  # a footnotesize table scaled below this prints under 5pt
# Mean glyph width (pt) of Latin Modern text at each size: digits are 0.5 em, lower case a bit
# narrower, capitals wider; 0.52 em errs on the wide side.
EM = {"tiny": 5.0, "scriptsize": 7.0, "footnotesize": 8.0, "small": 9.0, "normalsize": 10.0}
CHAR_EM = 0.52


# ---- the estimate ------------------------------------------------------------------------------


def _group(text: str, i: int) -> tuple[str, int]:
    """The braced group starting at text[i] == '{': (its content, the index after it)."""
    assert text[i] == "{", text[i:]
    depth, j = 1, i + 1
    while depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i + 1 : j - 1], j


def columns(spec: str) -> list[tuple[str, float | None]]:
    """The columns of a tabular spec: ('l'|'c'|'r', None) or ('p', width as a share of the
    line); '@{}' as ('@', None) (no gap at that side), '>{..}'/'<{..}' and '|' skipped."""
    out: list[tuple[str, float | None]] = []
    i = 0
    while i < len(spec):
        ch = spec[i]
        if ch in "lcr":
            out.append((ch, None))
            i += 1
        elif ch in "pmb" and i + 1 < len(spec) and spec[i + 1] == "{":
            width, i = _group(spec, i + 1)
            m = re.fullmatch(r"\s*([\d.]*)\s*\\(?:line|text|column)width\s*", width)
            if m:
                out.append(("p", float(m.group(1) or 1)))
            else:
                m = re.fullmatch(r"\s*([\d.]+)\s*(cm|mm|in|pt|em)\s*", width)
                assert m, f"column width {width!r}"
                pt = {"cm": 28.45, "mm": 2.845, "in": 72.27, "pt": 1.0, "em": 10.0}[m.group(2)]
                out.append(("p", float(m.group(1)) * pt / TEXT_WIDTH_PT))
        elif ch in "@!><":
            _, i = _group(spec, i + 1)
            if ch == "@":
                out.append(("@", None))
        elif ch == "*":
            n, i = _group(spec, i + 1)
            body, i = _group(spec, i)
            spec = spec[:i] + body * int(n) + spec[i:]
        else:
            i += 1
    return out


def visible_chars(cell: str) -> float:
    """About how many glyph widths a cell's LaTeX prints."""
    text = re.sub(r"\\discretionary\{\}\{\}\{\}", "", cell)
    text = re.sub(r"\\(?:textbf|textit|emph|texttt|text|mathrm|mathbf|variant)\{", "{", text)
    text = re.sub(r"\\(?:pm|times|to|le|ge|approx|cdot|Delta|lambda|eta|sigma|mu)\b", "x", text)
    text = re.sub(r"\\[,;!]", " ", text)
    text = re.sub(r"\\([%_&#$])", r"\1", text)
    text = re.sub(r"[_^]\{([^{}]*)\}", lambda m: "x" * max(1, round(0.7 * len(m.group(1)))), text)
    text = re.sub(r"\\[A-Za-z]+\*?", "", text)  # any other command prints about nothing
    return float(len(re.sub(r"[{}$]", "", text).strip()))


def tabulars(tex: str) -> list[tuple[str, str, list[list[str]]]]:
    """(font size, column spec, rows of cells) of each tabular in a generated table file."""
    out = []
    for m in re.finditer(r"\\begin\{(tabular|longtable)\}", tex):
        spec, i = _group(tex, m.end())
        body = tex[i : tex.index(f"\\end{{{m.group(1)}}}", i)]
        # a longtable's head and foot (caption, header, rules) come before its last \end... mark
        marks = [body.rfind(k) + len(k) for k in ("\\endhead", "\\endfoot") if k in body]
        body = body[max([0, *marks]) :]
        head = tex[: m.start()]
        start = max(head.rfind("\\begin{table}"), head.rfind("\\begingroup"))
        sizes = re.findall(r"\\(" + "|".join(EM) + r")\b", head[start:])
        rows = []
        for line in re.split(r"\\\\(?:\[[^\]]*\])?", body):
            line = re.sub(r"\\(?:top|mid|bottom)rule|\\cmidrule(?:\([lr]*\))?\{[^}]*\}", "", line)
            if line.strip():
                rows.append(re.split(r"(?<!\\)&", line))
        out.append((sizes[-1] if sizes else "normalsize", spec, rows))
    return out


def estimate_pt(size: str, spec: str, rows: list[list[str]], tabcolsep: float = 3.0) -> float:
    """Estimated natural width (pt) of one tabular: each natural column as wide as its longest
    single-column cell, each p column its declared width, plus the gaps around each column."""
    cols = columns(spec)
    real = [c for c in cols if c[0] != "@"]
    widths = []
    for k, (kind, share) in enumerate(real):
        if kind == "p":
            widths.append(share * TEXT_WIDTH_PT)  # type: ignore[operator]
            continue
        cells = [r[k] for r in rows if k < len(r) and "\\multicolumn" not in r[k]]
        widths.append(max((visible_chars(c) for c in cells), default=0) * CHAR_EM * EM[size])
    gaps = 2 * tabcolsep * len(real) - tabcolsep * sum(1 for c in cols if c[0] == "@")
    return sum(widths) + gaps


def table_widths(tex: str) -> list[float]:
    """Estimated width (pt) of each tabular of a generated table file."""
    sep = re.search(r"\\setlength\{\\tabcolsep\}\{([\d.]+)pt\}", tex)
    gap = float(sep.group(1)) if sep else 6.0
    return [estimate_pt(size, spec, rows, gap) for size, spec, rows in tabulars(tex)]


def render(table: Table) -> str:
    return make_env(ROOT / "paper" / "templates").get_template("table.tex.j2").render(t=table)


def wrapped_tables() -> dict[str, bool]:
    """{generated table name: whether every section inputs it through \\fitwidetables}."""
    out: dict[str, bool] = {}
    for path in SECTIONS:
        text = re.sub(r"(?<!\\)%.*", "", path.read_text())
        for m in re.finditer(r"\\input\{generated/tables/([\w-]+)(?:\.tex)?\}", text):
            line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
            inside = "\\fitwidetables" in line
            out[m.group(1)] = out.get(m.group(1), True) and inside
    return out


def fits(name: str, width: float, wrapped: bool) -> str | None:
    """Why a table of estimated ``width`` does not fit (None when it does)."""
    if width <= TEXT_WIDTH_PT:
        return None
    if not wrapped:
        return f"{name}: ~{width:.0f}pt on a {TEXT_WIDTH_PT:.0f}pt line and not in \\fitwidetables"
    scale = TEXT_WIDTH_PT / width
    if scale < MIN_SCALE:
        return f"{name}: ~{width:.0f}pt, scaled to {scale:.2f} (< {MIN_SCALE}): shorten it"
    return None


# ---- the checks --------------------------------------------------------------------------------


def test_every_generated_table_is_input_through_fitwidetables():
    unwrapped = sorted(name for name, ok in wrapped_tables().items() if not ok)
    assert not unwrapped, (
        f"paper/sections input {unwrapped} without \\fitwidetables: write "
        "{\\fitwidetables\\input{generated/tables/NAME.tex}} so a table wider than the line is "
        "scaled to it instead of running off the page"
    )


def test_the_estimate_knows_a_wide_table_from_a_narrow_one():
    # the generative main table (its header and row labels, numbers of a paper build): ten
    # columns, the last ones off the page unless scaled
    from pillm.generative.tables import FAMILY_NAMES, METHOD_NAMES, TABLES

    _, colspec, header, _ = TABLES["gen_main"]
    row = ["CIFAR-10", FAMILY_NAMES["diff_bucketed"], METHOD_NAMES["adamw"] + ", lr 0.003",
           "2101248", "123.4", "0.0123 $\\pm$ 0.0004", "12.34 $\\pm$ 0.56",
           "0.0123 $\\pm$ 0.0031", "0.623", "3"]  # fmt: skip
    wide = table_widths(render(Table("c", "tab:x", colspec, header, [row] * 4)))[0]
    assert wide > 1.2 * TEXT_WIDTH_PT  # runs off the page unless scaled
    assert fits("gen_main", wide, wrapped=False) and fits("gen_main", wide, wrapped=True) is None
    narrow = table_widths(render(Table("c", "tab:y", "lr", ["Variant", "PPL"], [["a", "1.0"]])))
    assert narrow[0] < 100
    assert columns("@{}>{\\raggedright\\arraybackslash}p{0.2\\linewidth}rl@{}") == [
        ("@", None),
        ("p", 0.2),
        ("r", None),
        ("l", None),
        ("@", None),
    ]
    assert visible_chars("12.3 $\\pm$ 0.4") == len("12.3 x 0.4")
    assert visible_chars("lora\\_\\discretionary{}{}{}pillm") == len("lora_pillm")


def test_claims_table_fits_with_every_verdict():
    """The appendix table of every claim: wrapping columns keep it within the line at any
    number of claims and any length of arm names."""
    from pillm.paper import claim_text as text
    from pillm.paper.verdicts import Result

    spec = {"metrics": {"accuracy": {"noun": "accuracy", "better": "higher", "digits": 1}},
            "names": {"pillm_lora": "tuned LoRA on the \\pillm{} baseline",
                      "pillm_pil_adapter": "the in-layer PIL adapter on the \\pillm{} baseline"}}  # fmt: skip
    verdicts = ["holds", "opponent did not train", "identical by construction", "not run"]
    results = [
        Result(f"lora_pillm_lora_vs_adapter_{k}", "lora", "accuracy", "direction", "pillm_lora",
               "pillm_pil_adapter", "higher", v, n=5, diff=-12.345, ci_lo=-15.5, ci_hi=-9.25,
               boot_lo=-14.5, boot_hi=-10.0, agree=5, p_value=0.00012, p_holm=0.0031)
        for k, v in enumerate(verdicts)
    ]  # fmt: skip
    tex = render(text.claims_table(results, {"lora": spec}))
    (width,) = table_widths(tex)
    assert width <= TEXT_WIDTH_PT, f"claims table ~{width:.0f}pt"


def test_lora_table_fits_the_line_after_scaling():
    import polars as pl

    from pillm.lora.report import METHODS, LoraReport

    rows = [
        {"model": f"{g}-s{s}", "method": m, "model_group": g, "model_label": label, "seed": s,
         "device_name": "NVIDIA H200", "accuracy": 0.8123, "dev_accuracy": 0.8012,
         "fit_seconds": 12.345, "tune_seconds": 123.45, "peak_memory_mb": 12345.0,
         "trainable_params": 1234567.0, "identical_rerun": 1.0, "max_abs_diff": 1.2e-7}
        for g, label in (("pillm", "pillm baseline"), ("minilm", "all-MiniLM-L6-v2"))
        for m in METHODS for s in range(3)
    ]  # fmt: skip
    rep = LoraReport(pl.DataFrame(rows), pl.DataFrame({"model": []}), {})
    header = ["Model", "Method", "Val.\\ acc.\\ (\\%)", "Dev acc.\\ (\\%)", "Fit (s)",
              "With selection (s)", "Peak MB", "Trainable", "Identical", "max $|\\Delta w|$"]  # fmt: skip
    tex = render(Table("c", "tab:lora", "llrrrrrrrr", header, rep.table_rows()))
    (width,) = table_widths(tex)
    assert wrapped_tables()["lora"]
    assert fits("lora", width, wrapped=True) is None, f"lora table ~{width:.0f}pt"


def test_lm_main_table_with_both_lambada_columns_fits_the_line_after_scaling():
    from pillm.lm.labels import LABELS
    from pillm.lm.report import LM_TABLES

    label, spec, header = LM_TABLES["lm_main"]
    pm = "\\ensuremath{\\pm}"
    cells = ["3.20", "2.10", f"1234.5 {pm} 12.3", f"12.34 {pm} 1.23", f"1234.5 {pm} 123.4",
             f"12.3 {pm} 1.2", f"1.234 {pm} 0.123", f"12.3 {pm} 1.2", f"12.3 {pm} 1.2", "5/5"]  # fmt: skip
    rows = [[name, *cells] for name in LABELS.values()]
    tex = render(Table("c", label, spec, header, rows, "t", "small", "4pt"))
    (width,) = table_widths(tex)
    assert wrapped_tables()["lm_main"]
    assert fits("lm_main", width, wrapped=True) is None, f"lm_main table ~{width:.0f}pt"


def build_dirs() -> list[Path]:
    """Paper builds to check: $PILLM_RESULTS (a results/<name> folder) or ./results/*."""
    env = os.environ.get("PILLM_RESULTS")
    roots = [Path(env)] if env else sorted((ROOT / "results").glob("*"))
    return [r / "paper" for r in roots if (r / "paper" / "generated" / "tables").is_dir()]


def test_a_builds_generated_tables_fit():
    builds = build_dirs()
    if not builds:
        pytest.skip("no paper build with generated tables (results/<name>/paper/generated/)")
    wrapped = wrapped_tables()
    problems = []
    for build in builds:
        for path in sorted((build / "generated" / "tables").glob("*.tex")):
            for width in table_widths(path.read_text()):
                why = fits(path.stem, width, wrapped.get(path.stem, False))
                if why and path.stem in wrapped:  # tables the text does not input are not printed
                    problems.append(f"{build}: {why}")
    assert not problems, "\n".join(problems)


# ---- the LaTeX log of a real build -------------------------------------------------------------

OVERFULL = re.compile(r"Overfull \\hbox \(([\d.]+)pt too wide\) (in [a-z]+ at lines? [\d-]+)")


def overfull_tables(log: str, tolerance_pt: float = 1.0) -> list[str]:
    """'<file>: <pt>pt too wide <where>' for each Overfull \\hbox TeX reported while reading a
    generated table file (the file stack follows the log's '(file' ... ')' nesting)."""
    out, stack = [], []
    i = 0
    while i < len(log):
        m = OVERFULL.match(log, i)
        if m:
            here = next((f for f in reversed(stack) if f), "")
            if "generated/tables/" in here and float(m.group(1)) > tolerance_pt:
                out.append(f"{here}: {m.group(1)}pt too wide {m.group(2)}")
            i = m.end()
            continue
        ch = log[i]
        if ch == "(":
            f = re.match(r"\(([^\s()]+\.tex)", log[i:])
            stack.append(f.group(1) if f else "")
        elif ch == ")" and stack:
            stack.pop()
        i += 1
    return out


def test_log_parser_attributes_overfull_boxes_to_table_files():
    log = (
        "(./main.tex (./sections/generative.tex (./generated/tables/gen_main.tex\n"
        "Overfull \\hbox (87.3pt too wide) in paragraph at lines 5--30\n"
        " []\n) (./generated/tables/gen_speed.tex\n"
        "Overfull \\hbox (0.4pt too wide) in paragraph at lines 5--20\n)\n"
        "Overfull \\hbox (12.0pt too wide) in paragraph at lines 101--103\n"
        "(see the transcript file for additional information)))"
    )
    assert overfull_tables(log) == [
        "./generated/tables/gen_main.tex: 87.3pt too wide in paragraph at lines 5--30"
    ]


def test_a_builds_latex_log_has_no_overfull_table():
    logs = [
        p for b in build_dirs() for p in (b / "build" / "main.log", b / "main.log") if p.is_file()
    ]
    if not logs:
        pytest.skip("no LaTeX log of a paper build (needs TeX Live and a finished pdf rule)")
    problems = [
        f"{log}: {p}" for log in logs for p in overfull_tables(log.read_text(errors="replace"))
    ]
    assert not problems, "tables wider than the text:\n" + "\n".join(problems)


# ---- a table longer than a page ----------------------------------------------------------------

PREAMBLE = "\n".join(
    line for line in (ROOT / "paper" / "main.tex").read_text().splitlines()
    if line.startswith(("\\documentclass", "\\usepackage"))
)  # fmt: skip


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="TeX (pdflatex) not installed")
def test_a_claims_table_longer_than_a_page_breaks_across_pages(tmp_path):
    """The claims table is a longtable: 150 claims run over several pages, every row printed
    (a float that tall is cut at the page's foot: "Float too large for page")."""
    from pillm.paper import claim_text as text
    from pillm.paper.build import NO_SHELL
    from pillm.paper.verdicts import Result

    spec = {"metrics": {"accuracy": {"noun": "accuracy", "better": "higher", "digits": 1}}}
    results = [
        Result(f"claim_{k}", "lora", "accuracy", "direction", "arm_a", "arm_b", "higher", "holds",
               n=5, diff=1.5, ci_lo=1.0, ci_hi=2.0, boot_lo=1.1, boot_hi=1.9, agree=5,
               p_value=0.001, p_holm=0.01)
        for k in range(150)
    ]  # fmt: skip
    (tmp_path / "claims.tex").write_text(render(text.claims_table(results, {"lora": spec})))
    (tmp_path / "main.tex").write_text(
        PREAMBLE + "\n\\newcommand{\\pillm}{pillm}\n\\begin{document}\nText.\n"
        "\\input{claims.tex}\nLast line: \\ref{tab:claim-checks}.\n\\end{document}\n"
    )
    for _ in range(2):  # the second pass settles longtable's column widths
        proc = subprocess.run(["pdflatex", NO_SHELL, "-interaction=nonstopmode", "main.tex"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    log = (tmp_path / "main.log").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "Float too large" not in log
    pages = int(re.search(r"Output written on main\.pdf \((\d+) pages?", log).group(1))
    assert pages >= 3, pages
    assert not overfull_tables(log)


def test_a_float_taller_than_the_page_stops_the_pdf_job():
    """The pdf job reads the log: a cut float (rows missing from the PDF) is an error, naming the
    input line and the fix."""
    from pillm.paper.build import check_floats

    check_floats("LaTeX Warning: Reference `tab:x' undefined", Path("main.log"))
    log = "LaTeX Warning: Float too large for page by 3621.38724pt on input line 116.\n"
    with pytest.raises(
        RuntimeError, match=r"3621\.38724 pt too tall \(input line 116\).*page_breaks"
    ):
        check_floats(log, Path("main.log"))
