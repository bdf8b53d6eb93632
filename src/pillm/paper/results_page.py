"""The results page: one self-contained HTML file that opens on the build's headline results.

``results/<name>/report/index.html``: the declared claims with their verdicts and 95 % intervals
(``summary/claims.parquet``) first, then one section per wing (each rules file's ``wing(...)``
registration) with its tables and its figures, each figure under its own caption. Captions and
the sections' titles and questions live in ``workflow/report/captions/<wing>.yaml``:

```yaml
title: Language models        # the section's heading
question: >-                  # one paragraph under it: what the section answers
  ...
tables: [lm_main]             # shown open, in this order; the wing's other tables fold below
figures:                      # one caption per figure, by file stem; every figure needs one
  training_curves: Training loss ...
```

Everything is inline (CSS, figures as PNG data URIs), so the file opens from disk, from the
Snakemake report (``snakemake --report``, where it is the first item of category Overview) or as
a mail attachment. Tables are the HTML ``pillm.paper.html`` wrote beside each ``.tex``.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pillm.core.records import write_text
from pillm.paper.html import STYLE as TABLE_STYLE
from pillm.paper.html import latex_text
from pillm.paper.verdicts import (
    HOLDS,
    IDENTICAL,
    INDISTINGUISHABLE,
    NO_INTERVAL,
    NO_SEEDS,
    NOT_EQUIVALENT,
    NOT_EVALUATED,
    NOT_RUN,
    ONE_SEED,
    OPPONENT_UNTRAINED,
    REVERSED,
    TOO_FEW,
)

if TYPE_CHECKING:  # polars only where a page is written: the Snakefile imports this on GPU hosts
    import polars as pl

CAPTIONS_DIR = "workflow/report/captions"  # where a wing's captions file lives, for messages

# Verdict -> CSS class (colour of its badge); every verdict of pillm.paper.verdicts has one.
VERDICT_CLASS = {
    HOLDS: "holds",
    REVERSED: "reversed",
    INDISTINGUISHABLE: "neutral",
    NOT_EQUIVALENT: "neutral",
    IDENTICAL: "neutral",
    OPPONENT_UNTRAINED: "weak",
    ONE_SEED: "weak",
    NO_INTERVAL: "weak",
    TOO_FEW: "weak",
    NOT_EVALUATED: "weak",
    NO_SEEDS: "weak",
    NOT_RUN: "missing",
}

PAGE_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:76em;margin:0 auto;padding:0 1.5em 3em;"
    "line-height:1.45;color:#1a1a1a}"
    "header{margin-bottom:1em}h1{margin:.6em 0 .2em}"
    "nav{margin:.6em 0 1em}nav a{margin-right:1.2em}"
    "section{margin:2.5em 0;border-top:1px solid #ccc;padding-top:.5em}"
    ".question{max-width:60em;color:#333}"
    ".counts span{display:inline-block;margin:0 .8em .4em 0}"
    ".badge{display:inline-block;padding:.05em .5em;border-radius:.8em;font-size:.9em;"
    "white-space:nowrap;background:#eee}"
    ".badge.holds{background:#cdeccd}.badge.reversed{background:#f6c9c9}"
    ".badge.neutral{background:#dde3ee}.badge.weak{background:#f8e6b8}"
    ".badge.missing{background:#eee;color:#666}"
    "table.claims td{vertical-align:top}table.claims td.sentence{text-align:left;max-width:38em}"
    "table.claims th:nth-child(2),table.claims th:nth-child(3){text-align:left}"
    "table.claims td:nth-child(3){text-align:left}"
    "figure{margin:1.5em 0;max-width:100%}"
    "figure img{display:block;max-width:100%;min-width:min(40em,100%);height:auto;"
    "border:1px solid #ddd}"
    "figcaption{max-width:60em;margin-top:.4em;font-size:.95em}"
    "details{margin:1em 0}summary{cursor:pointer;color:#333}"
    ".flips{background:#fff7e0;padding:.4em .8em;border-left:4px solid #e0b000}"
    "code{font-size:.95em}.table-wrap{overflow-x:auto;max-width:100%}"
)


class ResultsPageError(ValueError):
    """A section without a captions file, or a figure without a caption: the message names the
    file and the key to add."""


# ---- the sections, from the workflow's wing registrations -------------------------------------


def _flat(files: Any) -> list[str]:
    """A registration's paths: a path, or (nested) lists and rule outputs of paths."""
    return [str(files)] if isinstance(files, str) else [f for x in files for f in _flat(x)]


def page_sections(
    wings: Mapping[str, Mapping[str, Any]], skip: Sequence[str] = ("paper",)
) -> dict[str, dict[str, list[str]]]:
    """Each wing's (``workflow/rules/common.smk`` ``wing(...)``) tables and figures among the
    files it hands the paper: the ``.tex`` under ``tables/`` and the ``.png`` beside each
    ``.pdf`` under ``figures/``; the wings in ``skip`` (the paper's own claims table) left out."""
    out = {}
    for name, reg in wings.items():
        if name in skip:
            continue
        files = _flat(reg["paper"])
        out[name] = {
            "tables": [f for f in files if "/tables/" in f and f.endswith(".tex")],
            "figures": [f.removesuffix(".pdf") + ".png" for f in files
                        if "/figures/" in f and f.endswith(".pdf")],
        }  # fmt: skip
    return out


def stems(sections: Mapping[str, Mapping[str, list[str]]]) -> list[list[Any]]:
    """``page_sections`` by file stem, as ``[wing, {"tables": [...], "figures": [...]}]`` pairs:
    the page's order survives JSON with sorted keys (the rule's ``--params``)."""
    return [
        [w, {k: [Path(f).stem for f in fs] for k, fs in s.items()}] for w, s in sections.items()
    ]


# ---- inputs ------------------------------------------------------------------------------------


def load_captions(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """Each captions file by its stem (the wing it describes)."""
    out = {}
    for p in paths:
        data = yaml.safe_load(Path(p).read_text()) or {}
        data.setdefault("figures", {})
        data.setdefault("tables", [])
        out[Path(p).stem] = data
    return out


def table_body(html_path: str | Path) -> str:
    """The ``<body>`` of a table page ``pillm.paper.html.page_html`` wrote: its table(s)."""
    text = Path(html_path).read_text()
    m = re.search(r"<body>(.*)</body>", text, re.S)
    # a wide table scrolls inside its box instead of widening the page
    return f'<div class="table-wrap">{m.group(1) if m else text}</div>'


def data_uri(png: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(png).read_bytes()).decode("ascii")


def by_stem(paths: Sequence[str | Path]) -> dict[str, Path]:
    return {Path(p).stem: Path(p) for p in paths}


# ---- claims ------------------------------------------------------------------------------------


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _interval(row: Mapping[str, Any]) -> str:
    if row["ci_lo"] is None:
        return "–"
    text = f"[{_num(row['ci_lo'])}, {_num(row['ci_hi'])}]"
    if row.get("margin") is not None:
        text += f" (margin ±{_num(row['margin'])})"
    return text


def badge(verdict: str) -> str:
    cls = VERDICT_CLASS.get(verdict, "")
    return f'<span class="badge {cls}">{html.escape(verdict)}</span>'


def verdict_counts(claims: pl.DataFrame) -> str:
    """One line per study: how many of its claims got each verdict."""
    import polars as pl

    lines = []
    for study in claims["study"].unique(maintain_order=True).to_list():
        sub = claims.filter(pl.col("study") == study)
        counts = sub["verdict"].value_counts(sort=True).iter_rows()
        parts = " ".join(f"{badge(v)}&nbsp;{n}" for v, n in counts)
        lines.append(f"<span><b>{html.escape(study)}</b> ({sub.height}): {parts}</span>")
    return '<p class="counts">' + "<br>".join(lines) + "</p>"


def claims_html(claims: pl.DataFrame, flips: str) -> str:
    """The claims section: verdict counts per study, the flips since the previous build, and
    one row per claim (its sentence, verdict, mean difference a − b and 95 % interval)."""
    head = (
        "<thead><tr><th>Study</th><th>Claim</th><th>Verdict</th><th>a − b</th>"
        "<th>95 % interval</th><th>Seeds</th></tr></thead>"
    )
    rows = []
    for r in claims.iter_rows(named=True):
        missing = f" (missing: {html.escape(r['missing'])})" if r["missing"] else ""
        rows.append(
            f'<tr id="claim-{html.escape(r["id"])}"><td>{html.escape(r["study"])}</td>'
            f'<td class="sentence">{latex_text(r["sentence"])}{missing}'
            f"<br><small><code>{html.escape(r['id'])}</code> · {html.escape(r['metric'])}, "
            f"{html.escape(r['better'])} is better · {html.escape(r['test'])}</small></td>"
            f"<td>{badge(r['verdict'])}</td><td>{_num(r['diff'])}</td>"
            f'<td title="{html.escape(r["ci_method"] or "")}">{_interval(r)}</td>'
            f"<td>{r['n']}</td></tr>"
        )
    flips = flips.strip()
    flip_text = html.escape(flips).replace("\n", "<br>")
    flip_block = f'<p class="flips">Since the previous build: {flip_text}</p>' if flips else ""
    return (
        '<section id="claims"><h2>Claims</h2>'
        '<p class="question">Every direction word in the paper comes from one of these declared '
        "claims (<code>paper/claims/&lt;study&gt;.yaml</code>), evaluated on this build's "
        "summaries: a paired difference over seeds and its 95 % interval. A claim "
        "<i>holds</i> when the interval excludes zero on the declared side.</p>"
        f"{verdict_counts(claims)}{flip_block}"
        f'<table class="claims" id="claims-table">{head}<tbody>{"".join(rows)}</tbody></table>'
        "</section>"
    )


# ---- study sections ----------------------------------------------------------------------------


def figure_html(stem: str, png: Path, caption: str) -> str:
    return (
        f'<figure id="fig-{html.escape(stem)}"><img alt="{html.escape(stem)}" '
        f'src="{data_uri(png)}"><figcaption><b>{html.escape(stem)}.</b> '
        f"{html.escape(caption)}</figcaption></figure>"
    )


def section_html(
    wing: str,
    captions: Mapping[str, Any],
    tables: Mapping[str, Path],
    figures: Mapping[str, Path],
) -> str:
    """One wing: title, question, its open tables, the rest folded, then every figure."""
    open_names = [t for t in captions["tables"] if t in tables]
    folded = [t for t in tables if t not in open_names]
    parts = [f'<section id="{html.escape(wing)}" class="study">']
    parts.append(f"<h2>{html.escape(captions.get('title', wing))}</h2>")
    if captions.get("question"):
        parts.append(f'<p class="question">{html.escape(captions["question"])}</p>')
    parts += [table_body(tables[t]) for t in open_names]
    if folded:
        parts.append(
            f"<details><summary>More tables: {html.escape(', '.join(folded))}</summary>"
            + "".join(table_body(tables[t]) for t in folded)
            + "</details>"
        )
    for stem, png in figures.items():
        caption = captions["figures"].get(stem)
        if caption is None:
            raise ResultsPageError(
                f"{CAPTIONS_DIR}/{wing}.yaml has no caption for figure {stem} ({png}); add "
                f"`{stem}: <one or two sentences>` under its figures:"
            )
        parts.append(figure_html(stem, png, caption))
    parts.append("</section>")
    return "".join(parts)


def page_html(
    name: str,
    claims: pl.DataFrame,
    flips: str,
    sections: Mapping[str, Mapping[str, list[str]]],
    captions: Mapping[str, Mapping[str, Any]],
    tables: Mapping[str, Path],
    figures: Mapping[str, Path],
) -> str:
    """The whole page; ``sections`` maps each wing to the stems of its tables and figures."""
    missing = [w for w in sections if w not in captions]
    if missing:
        raise ResultsPageError(
            f"no captions file for section(s) {missing}: add {CAPTIONS_DIR}/<wing>.yaml with "
            "title:, question:, tables: and figures: (see pillm.paper.results_page)"
        )
    import polars as pl

    order = {w: i for i, w in enumerate(sections)}  # a study's claims where its section is
    claims = (
        claims.with_row_index("_declared")
        .sort(
            pl.col("study").replace_strict(order, default=len(order), return_dtype=pl.Int64),
            "_declared",
        )
        .drop("_declared")
    )
    body = [claims_html(claims, flips)]
    for wing, files in sections.items():
        body.append(
            section_html(
                wing,
                captions[wing],
                {t: tables[t] for t in files.get("tables", [])},
                {f: figures[f] for f in files.get("figures", [])},
            )
        )
    nav = '<a href="#claims">Claims</a>' + "".join(
        f'<a href="#{html.escape(w)}">{html.escape(captions[w].get("title", w))}</a>'
        for w in sections
    )
    title = f"pillm results: {name}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{TABLE_STYLE}{PAGE_STYLE}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>Closed-form (pseudoinverse / ridge) solves "
        "against gradient training of Transformer feed-forward blocks. Every number below was "
        f"made by this build of configuration <code>{html.escape(name)}</code>; the paper, where TeX "
        'built it, is <a href="../paper/main.pdf">paper/main.pdf</a> beside this folder.</p>'
        f"<nav>{nav}</nav></header>" + "\n".join(body) + "</body></html>\n"
    )


def write_results_page(
    claims: str,
    flips: str,
    tables: list[str],
    figures: list[str],
    captions: list[str],
    params: dict[str, Any],
    out: str,
) -> None:
    """``python -m pillm results-page``: ``out`` from the claims parquet, the flips text, the
    tables' ``.tex`` files (the ``.html`` beside each is read), the figures' PNGs and the
    captions files; ``params``: the config ``name`` and the ``sections`` in page order
    (``stems(page_sections(...))``: [wing, {"tables": stems, "figures": stems}] pairs)."""
    import polars as pl

    html_tables = {stem: p.with_suffix(".html") for stem, p in by_stem(tables).items()}
    page = page_html(
        params["name"],
        pl.read_parquet(claims),
        Path(flips).read_text(),
        dict(params["sections"]),
        load_captions(captions),
        html_tables,
        by_stem(figures),
    )
    write_text(out, page)
