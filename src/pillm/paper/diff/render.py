"""A build diff as text (printed by ``pillm diff``) and as an HTML page (``--html``)."""

from __future__ import annotations

import html

from pillm.paper.diff.changes import KIND_TEXT, BuildDiff

SECTIONS = {
    "claims": "Claims whose verdict flipped",
    "context": "Data and tokenizer labels that changed",
    "metrics": "Metrics that changed (beyond seed noise; flagged where no seed noise is known)",
    "tables": "Table cells that moved",
    "macros": "Paper numbers (macros) that moved",
    "cost": "Costs that changed (time, memory, throughput: machine- and load-dependent)",
}


def render_text(d: BuildDiff) -> str:
    lines = [f"A: {d.a}", f"B: {d.b}"]
    for sec, title in SECTIONS.items():
        rows = d.section(sec)
        lines.append(f"\n{title}: {len(rows) or 'none'}")
        if sec == "metrics":
            lines.append(f"  {d.chance_line()}")
        for c in rows:
            note = f"  ({c.note})" if c.note else ""
            lines.append(f"  [{KIND_TEXT[c.kind]}] {c.where} {c.what}: {c.a} -> {c.b}{note}")
    if d.notes:
        lines.append("\nNot compared:")
        lines += [f"  {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


CSS = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eee}
tr.noise td.b{background:#ffd8a8}tr.no_noise td.b{background:#fff3bf}tr.flip td.b{background:#ffc9c9}
tr.cell td.b,tr.macro td.b,tr.context td.b{background:#d0ebff}tr.only_a,tr.only_b{color:#666}
.kind{font-size:smaller;white-space:nowrap}"""


def render_html(d: BuildDiff) -> str:
    e = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>pillm diff</title>"
        f"<style>{CSS}</style></head><body><h1>pillm diff</h1>"
        f"<p>A: <code>{e(d.a)}</code><br>B: <code>{e(d.b)}</code></p>"
    ]
    for sec, title in SECTIONS.items():
        rows = d.section(sec)
        parts.append(f"<h2>{e(title)}: {len(rows) or 'none'}</h2>")
        if sec == "metrics":
            parts.append(f"<p>{e(d.chance_line())}</p>")
        if not rows:
            continue
        parts.append(
            "<table><tr><th>change</th><th>where</th><th>what</th><th>A</th><th>B</th><th>note</th></tr>"
        )
        for c in rows:
            parts.append(
                f"<tr class='{c.kind}'><td class='kind'>{e(KIND_TEXT[c.kind])}</td><td>{e(c.where)}</td>"
                f"<td>{e(c.what)}</td><td>{e(c.a)}</td><td class='b'>{e(c.b)}</td><td>{e(c.note)}</td></tr>"
            )
        parts.append("</table>")
    if d.notes:
        parts.append(
            "<h2>Not compared</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in d.notes) + "</ul>"
        )
    return "\n".join(parts) + "</body></html>\n"
