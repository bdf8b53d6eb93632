"""Read back what the report templates wrote: table cells and macro values of generated ``.tex``.

``pillm diff`` compares two builds' generated files through these, so a cell is named the way a
reader finds it (table label, row, column header) rather than by line number.
"""

from __future__ import annotations

import re

# Rule commands carry no cell: booktabs rules, \hline, \addlinespace, \cmidrule(lr){2-3}.
RULES = re.compile(
    r"\\(?:toprule|midrule|bottomrule|hline|addlinespace)(?:\[[^\]]*\])?"
    r"|\\cmidrule(?:\([^)]*\))?\{[^}]*\}"
)
TABULAR = re.compile(r"\\begin\{tabular\}\{((?:[^{}]|\{[^{}]*\})*)\}(.*?)\\end\{tabular\}", re.S)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside braces (``\\shortstack{a\\\\b}`` stays one cell);
    ``&`` escaped as ``\\&`` is text, not a separator."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and text.startswith(sep, i) and depth == 0:
            parts.append(text[start:i])
            i = start = i + len(sep)
            continue
        if c == "\\":  # an escaped character (\{, \&, \\) is text
            i += 2
            continue
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        depth += (c == "{") - (c == "}")
        i += 1
    parts.append(text[start:])
    return parts


def _rows(body: str) -> list[list[str]]:
    """Non-empty rows of a tabular body: split at row ends (``\\\\[2pt]`` too), then cells at ``&``."""
    rows = [
        [c.strip() for c in _split_top(RULES.sub("", re.sub(r"^\s*\[[^\]]*\]", "", seg)), "&")]
        for seg in _split_top(body, "\\\\")
    ]
    return [r for r in rows if any(r)]


def table_cells(tex: str) -> dict[tuple[str, str, str], str]:
    """Cells of every ``tabular`` in ``tex`` as {(table label, row name, column header): text}.

    The table is named by the last ``\\label`` before it (else 'tabular <k>'), a column by the
    first row (the header), a row by the text of its leading ``l`` columns (the first column when
    the table starts with a number column). A blank first label continues the group above (rows listed under one model); a
    repeated row name gets ' #2', ' #3', ...
    """
    cells: dict[tuple[str, str, str], str] = {}
    for k, m in enumerate(TABULAR.finditer(tex)):
        labels = re.findall(r"\\label\{([^}]*)\}", tex[: m.start()])
        table = labels[-1] if labels else f"tabular {k + 1}"
        kinds = re.sub(r"[@!<>]\{[^}]*\}|[pmbwx]\{[^}]*\}|\||\s", "", m.group(1))
        rows = _rows(m.group(2))
        if not rows:
            continue
        header, body = rows[0], rows[1:]
        # Leading l columns name the row (Model, Method); else the first column (Block).
        label_cols = [i for i, c in enumerate(kinds) if c == "l" and kinds[:i] == "l" * i] or [0]
        group = ""  # the first label column's last non-blank value
        seen: dict[str, int] = {}
        for row in body:
            parts = [row[i] if i < len(row) else "" for i in label_cols]
            if parts[0]:
                group = parts[0]
            else:
                parts[0] = group
            name = " / ".join(p for p in parts if p) or "(unnamed row)"
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name} #{seen[name]}"
            for j, value in enumerate(row):
                column = header[j] if j < len(header) and header[j] else f"column {j + 1}"
                cells[(table, name, column)] = value
    return cells


def macro_values(tex: str) -> dict[str, str]:
    """{name: value} of the one-line ``\\newcommand{\\Name}{value}`` definitions in ``tex``."""
    return dict(re.findall(r"(?m)^\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}\s*$", tex))
