"""Every paper table also as HTML (pillm.paper.html), from the same Table objects as the LaTeX."""

from pathlib import Path

from pillm.paper.html import latex_text, page_html
from pillm.paper.report import render_report
from pillm.paper.table import LongTable, Table

REPO = Path(__file__).resolve().parents[2]

TABLE = Table(
    caption=r"Test perplexity (mean $\pm$ std over seeds) \& \textbf{best} in bold",
    label="tab:small",
    colspec="lr",
    header=["Variant", r"PPL $\downarrow$"],
    rows=[["baseline", r"$12.3 \pm 0.4$"], "midrule", [r"pil\_then\_attn", r"\textbf{9.1}"]],
)


def test_html_has_caption_header_and_cells():
    page = page_html(TABLE, "small")
    assert (
        "<caption>Test perplexity (mean ± std over seeds) &amp; <b>best</b> in bold</caption>"
        in page
    )
    assert "<th>Variant</th><th>PPL ↓</th>" in page
    assert "<td>baseline</td><td>12.3 ± 0.4</td>" in page
    assert "<td>pil_then_attn</td><td><b>9.1</b></td>" in page
    assert page.count("<tbody>") == 2  # the midrule starts a new block
    assert "\\" not in page and "$" not in page


def test_empty_table_and_long_table():
    empty = Table("Nothing yet", "tab:e", "ll", ["a", "b"], [])
    assert '<td colspan="2">no results in this build</td>' in page_html(empty, "e")
    long = LongTable([TABLE, empty], origin="test", empty="none")
    assert page_html(long, "l").count("<table") == 2
    assert "<p>none</p>" in page_html(LongTable([], origin="t", empty="none"), "l")


def test_render_report_writes_html_beside_tex(tmp_path):
    tex = tmp_path / "tables" / "small.tex"
    render_report({tex: TABLE}, {}, REPO / "paper/templates", tmp_path / "n.tex", origin="t")
    assert tex.is_file()
    assert "<td>baseline</td>" in tex.with_suffix(".html").read_text()


def test_latex_text_escapes_html():
    assert latex_text("a<b & c") == "a&lt;b &amp; c"
    assert latex_text(r"\emph{x}") == "<i>x</i>"


def test_stacked_headers_and_manuscript_macros():
    assert latex_text(r"\shortstack{$\Rlin$ mean\\{}[min, max]}") == "R²_lin mean<br>[min, max]"
    assert latex_text(r"\shortstack{Lin.\ swap\\{}best}") == "Lin. swap<br>best"
    assert latex_text(r"\pillm{} baseline, $\epsilon$") == "pillm baseline, ε"
