"""Generated ``.tex`` of two builds: table cells and macro values that moved.

Cells are named as a reader finds them (table label, row, column header) and macros by name
(``pillm.paper.diff.texcells``); whatever one build lacks is one line per row or per build.
"""

from __future__ import annotations

from pillm.paper.diff.changes import Change, one_side
from pillm.paper.diff.texcells import macro_values, table_cells


def compare_tables(name: str, tex_a: str, tex_b: str) -> list[Change]:
    """Cells whose text differs; cells one build lacks, one line per row."""
    ca, cb = table_cells(tex_a), table_cells(tex_b)
    out, only = [], {}
    for key in list(ca) + [k for k in cb if k not in ca]:
        (table, row, col), va, vb = key, ca.get(key), cb.get(key)
        if va is None or vb is None:
            side = "only_a" if vb is None else "only_b"
            only.setdefault((table, side, row), []).append(col)
        elif va != vb:
            out.append(Change("tables", f"{name} [{table}]", f"{row} | {col}", va, vb, "cell"))
    rows_a, rows_b = {k[:2] for k in ca}, {k[:2] for k in cb}
    for (table, side, row), cols in only.items():
        whole = (table, row) not in (rows_b if side == "only_a" else rows_a)
        what = f"row {row} ({len(cols)} cells)" if whole else f"{row} | {', '.join(cols)}"
        out.append(one_side("tables", f"{name} [{table}]", side, [what], "rows"))
    return out


def compare_macros(name: str, tex_a: str, tex_b: str) -> list[Change]:
    """Macros whose value differs; those one build lacks, one line per build."""
    ma, mb = macro_values(tex_a), macro_values(tex_b)
    out = [
        Change("macros", name, "\\" + k, ma[k], mb[k], "macro")
        for k in sorted(set(ma) & set(mb))
        if ma[k] != mb[k]
    ]
    for side, names in (("only_a", set(ma) - set(mb)), ("only_b", set(mb) - set(ma))):
        if names:
            out.append(one_side("macros", name, side, ["\\" + k for k in sorted(names)], "macros"))
    return out
