"""The paper's tables as HTML, from the same ``Table`` objects ``render_report`` writes as LaTeX.

``render_report`` writes ``<table>.html`` beside each ``<table>.tex``; the workflow collects them
into the Snakemake report (``snakemake --report``), so every table reads there with its caption,
beside the figures and the PDF. Cells are the LaTeX strings of the table (already formatted by
``pillm.paper.latex``): the few commands they use become their HTML or Unicode equivalents; any
other command is shown with its argument and without the backslash. Plain HTML, no dependencies.
"""

from __future__ import annotations

import html
import re

from pillm.paper.table import LongTable, Table

_COMMANDS = {"textbf": "b", "mathbf": "b", "emph": "i", "textit": "i", "underline": "u"}
_SYMBOLS = {
    r"\pm": "±", r"\times": "×", r"\approx": "≈", r"\le": "≤", r"\ge": "≥", r"\leq": "≤",
    r"\geq": "≥", r"\to": "→", r"\rightarrow": "→", r"\lambda": "λ", r"\alpha": "α",
    r"\beta": "β", r"\sigma": "σ", r"\mu": "μ", r"\Delta": "Δ", r"\infty": "∞", r"\cdot": "·",
    r"\%": "%", r"\&": "&", r"\_": "_", r"\#": "#", r"\$": "$", r"\,": " ", r"\;": " ",
    r"\ ": " ", r"\textsuperscript": "", r"\dagger": "†", r"\checkmark": "✓",
    r"\ensuremath": "", r"\downarrow": "↓", r"\uparrow": "↑", r"\epsilon": "ε", r"\kappa": "κ",
    # the manuscript's own macros (paper/main.tex) that tables use
    r"\Rlin": "R²_lin", r"\PPL": "PPL",
}  # fmt: skip
_CMD = re.compile(r"\\([A-Za-z]+)\{([^{}]*)\}")


def latex_text(cell: str) -> str:
    """A table cell's LaTeX as HTML: formatting commands to tags, symbols to Unicode, math
    dollars and grouping braces dropped, everything else escaped."""
    # a line break inside a cell (\shortstack{a\\{}b}) and empty groups go first, so the
    # command around them resolves below; \x03 marks the break until the text is escaped
    text = str(cell).replace("\\\\", "\x03").replace("{}", "")
    for cmd, char in sorted(_SYMBOLS.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(re.escape(cmd) + r"(?![A-Za-z])", lambda _m, c=char: c, text)
    text = text.replace("---", "—").replace("--", "–").replace("~", " ").replace("$", "")
    while True:  # innermost commands first, so nested ones resolve
        new = _CMD.sub(lambda m: f"\x00{m.group(1)}\x01{m.group(2)}\x02", text)
        if new == text:
            break
        text = new
    text = html.escape(text.replace("{", "").replace("}", ""), quote=False)

    def tag(m: re.Match) -> str:
        name, body = m.group(1), m.group(2)
        t = _COMMANDS.get(name)
        return f"<{t}>{body}</{t}>" if t else body

    while "\x00" in text:
        text = re.sub("\x00([A-Za-z]+)\x01([^\x00\x01\x02]*)\x02", tag, text)
    return text.replace("\\", "").replace("\x03", "<br>")


def table_html(table: Table) -> str:
    """One table: caption, header, body (a ``"midrule"`` row starts a new tbody)."""
    head = "".join(f"<th>{latex_text(h)}</th>" for h in table.header)
    bodies, rows = [], []
    for row in table.rows:
        if row == "midrule":
            bodies.append(rows)
            rows = []
        else:
            rows.append("<tr>" + "".join(f"<td>{latex_text(c)}</td>" for c in row) + "</tr>")
    bodies.append(rows)
    body = "".join("<tbody>" + "".join(b) + "</tbody>" for b in bodies if b)
    if not body and table.empty is not None:
        body = f'<tbody><tr><td colspan="{len(table.header)}">{html.escape(table.empty)}</td></tr></tbody>'
    return (
        f'<table id="{html.escape(table.label)}">'
        f"<caption>{latex_text(table.caption)}</caption>"
        f"<thead><tr>{head}</tr></thead>{body}</table>"
    )


STYLE = (
    "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:1em 0}"
    "caption{caption-side:top;text-align:left;padding:.4em 0;max-width:60em}"
    "th,td{padding:.2em .6em;text-align:right}th:first-child,td:first-child{text-align:left}"
    "thead th{border-bottom:1px solid #333;border-top:2px solid #333}"
    "tbody+tbody tr:first-child td{border-top:1px solid #999}"
    "table{border-bottom:2px solid #333}"
)


def page_html(table: Table | LongTable, title: str) -> str:
    """A standalone HTML page with one table, or each table of a ``LongTable`` in turn."""
    if isinstance(table, LongTable):
        parts = [table_html(t) for t in table.tables] or [f"<p>{html.escape(table.empty)}</p>"]
    else:
        parts = [table_html(table)]
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>" + "\n".join(parts) + "</body></html>\n"
    )
