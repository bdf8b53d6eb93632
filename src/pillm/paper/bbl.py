"""The manuscript's bibliography as BibTeX with plainnat would write it (``main.bbl``), in Python.

arXiv compiles a submission without running BibTeX, so the arXiv sources carry ``main.bbl``.
Where TeX is installed the PDF build's own ``main.bbl`` goes into them; on a machine without TeX
this module writes it from ``paper/refs.bib`` and the citations of the sources. It covers what
``refs.bib`` uses (article, inproceedings, misc, techreport, book; author, title, journal,
booktitle, volume, number, pages, year, howpublished, institution, publisher, edition, doi)
and plainnat's rules for them: author-year labels with ``\\natexlab`` letters, the sort order,
name ties, sentence-case titles. ``tests/paper/test_bbl.py`` compares it with BibTeX's output.
"""

from __future__ import annotations

import re
from pathlib import Path

from pillm.core.records import write_text

HEADER = r"""\begin{thebibliography}{%d}
\providecommand{\natexlab}[1]{#1}
\providecommand{\url}[1]{\texttt{#1}}
\expandafter\ifx\csname urlstyle\endcsname\relax
  \providecommand{\doi}[1]{doi: #1}\else
  \providecommand{\doi}{doi: \begingroup \urlstyle{rm}\Url}\fi
"""
CITE = re.compile(r"\\(?:no)?cite[a-zA-Z]*\*?(?:\[[^\]]*\]){0,2}\{([^}]*)\}")


def _braced(text: str, start: int) -> tuple[str, int]:
    """The content of the brace group opening at ``text[start]`` and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
    raise ValueError(f"unbalanced braces from {text[start:start + 40]!r}")


def parse_bib(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    """{key: (entry type, {field: value})} of a .bib file whose values are in braces or bare."""
    entries = {}
    for m in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        body, _ = _braced(text, m.start() + m.group(0).index("{"))
        fields, pos = {}, body.index(",") + 1  # after "key,"
        field = re.compile(r"\s*(\w+)\s*=\s*")
        while (f := field.match(body, pos)) is not None:
            pos = f.end()
            if body[pos] == "{":
                value, pos = _braced(body, pos)
            else:
                value = re.match(r"[^,\s]+", body[pos:]).group(0)
                pos += len(value)
            fields[f.group(1).lower()] = " ".join(value.split())
            pos = body.find(",", pos) + 1 if "," in body[pos:] else len(body)
        entries[m.group(2)] = (m.group(1).lower(), fields)
    return entries


def cited_keys(tex_files: list[Path]) -> list[str]:
    """The keys the sources cite, in first-citation order (``\\cite*{a,b}``, ``\\nocite``)."""
    keys: list[str] = []
    for path in tex_files:
        for group in CITE.findall(path.read_text(encoding="utf-8")):
            keys += [k.strip() for k in group.split(",") if k.strip() not in keys]
    return keys


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside braces."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    return [*parts, text[start:]]


def _length(token: str) -> int:
    """BibTeX's text length: a brace group opening with a control sequence counts as one."""
    return len(re.sub(r"\{\\[^}]*\}", "x", token).replace("{", "").replace("}", ""))


def _join(tokens: list[str]) -> str:
    """A name part's tokens as BibTeX joins them: a tie between the last two, and after a
    first token shorter than three characters; spaces elsewhere."""
    out = tokens[0] if tokens else ""
    for i, tok in enumerate(tokens[1:], start=1):
        tie = i == len(tokens) - 1 or (i == 1 and _length(tokens[0]) < 3)
        out += ("~" if tie else " ") + tok
    return out


def parse_name(name: str) -> tuple[list[str], list[str], list[str]]:
    """(first, von, last) tokens of 'von Last, First' or 'First von Last'."""
    if len(parts := _split_top(name, ",")) > 1:
        head, first = _split_top(parts[0].strip(), " "), _split_top(parts[1].strip(), " ")
        n_von = 0
        while n_von < len(head) - 1 and head[n_von][:1].islower():
            n_von += 1
        return first, head[:n_von], head[n_von:]
    toks = _split_top(name.strip(), " ")
    von = [i for i, t in enumerate(toks[:-1]) if t[:1].islower()]
    if not von:
        return toks[:-1], [], toks[-1:]
    return toks[: von[0]], toks[von[0] : von[-1] + 1], toks[von[-1] + 1 :]


def _full(first: list[str], von: list[str], last: list[str]) -> str:
    """'{ff~}{vv~}{ll}': between parts a tie after a part shorter than three characters."""
    out = ""
    for part in (first, von):
        if part:
            text = _join(part)
            out += text + ("~" if _length(text) < 3 else " ")
    return out + _join(last)


def _surname(first: list[str], von: list[str], last: list[str]) -> str:
    return _full([], von, last)


def _and(names: list[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + ", and " + names[-1]


def _purify(text: str) -> str:
    """BibTeX's ``purify$`` and lower case: accents and braces out, hyphens and ties to spaces."""
    text = re.sub(r"\\[a-zA-Z]+\s*|\\.", "", text).replace("-", " ").replace("~", " ")
    return re.sub(r"[^a-zA-Z0-9\s]", "", text).lower()


def sentence_case(title: str) -> str:
    """``change.case$ "t"``: lower case outside braces but the first character and a character
    after a colon and a space."""
    out, depth = [], 0
    for i, ch in enumerate(title):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        keep = depth > 0 or i == 0 or re.search(r":\s+$", title[:i]) is not None
        out.append(ch if keep else ch.lower())
    return "".join(out)


def _period(text: str) -> str:
    return text if re.sub(r"\}+$", "", text)[-1:] in ".?!" else text + "."


def _pages(pages: str) -> str:
    return re.sub(r"(?<!-)-(?!-)", "--", pages)


def _body(kind: str, f: dict[str, str], year: str) -> list[str]:
    """The blocks after the author list of one entry."""
    if kind == "book":
        publisher = ", ".join(
            x for x in (f.get("publisher"), f.get("edition", "").lower() + " edition") if x
        )
        return [f"\\emph{{{f['title']}}}.", f"{publisher}, {year}."]
    blocks = [_period(sentence_case(f["title"]))]
    if kind == "article":
        where = f"\\emph{{{f['journal']}}}"
        vol = f.get("volume", "") + (f"\\penalty0 ({f['number']})" if "number" in f else "")
        if "pages" in f:
            vol = f"{vol}:\\penalty0 {_pages(f['pages'])}" if vol else f"pages {f['pages']}"
        blocks.append(", ".join(x for x in (where, vol, year) if x) + ".")
    elif kind == "inproceedings":
        pages = f"pages {_pages(f['pages'])}" if "pages" in f else ""
        where = f"In \\emph{{{f['booktitle']}}}"
        blocks.append(", ".join(x for x in (where, pages, year) if x) + ".")
    elif kind == "techreport":
        blocks.append(f"Technical report, {f['institution']}, {year}.")
    else:  # misc
        blocks.append(", ".join(x for x in (f.get("howpublished"), year) if x) + ".")
    if "doi" in f:
        blocks.append(f"\\doi{{{f['doi']}}}.")
    return blocks


def render_bbl(entries: dict[str, tuple[str, dict[str, str]]], keys: list[str]) -> str:
    """``main.bbl`` for the cited ``keys``: plainnat's labels, order and entry layout."""
    if missing := [k for k in keys if k not in entries]:
        raise KeyError(f"cited but not in the bibliography: {', '.join(missing)}")
    items = []
    for key in keys:
        kind, f = entries[key]
        names = [parse_name(n) for n in _split_top(f["author"], " and ")]
        surnames = [_surname(*n) for n in names]
        short = _and(surnames) if len(names) <= 2 else f"{surnames[0]} et~al."
        sort_names = "   ".join(
            _purify(" ".join([*v, *la, *fi])) for fi, v, la in names
        )
        label = f"{short}({f['year']}"
        sort = "    ".join([_purify(label), sort_names, f["year"], key, _purify(f["title"])])
        items.append((sort, key, kind, f, names, short, _and(surnames), label))
    items.sort()
    lines = [HEADER % len(items)]
    for i, (_, key, kind, f, names, short, full, label) in enumerate(items):
        same = [j for j, it in enumerate(items) if it[7] == label]
        letter = f"{{\\natexlab{{{'abcdefghijklmnopqrstuvwxyz'[same.index(i)]}}}}}"
        year = f["year"] + (letter if len(same) > 1 else "")
        tail = "" if full == short else full
        authors = _and([_full(*n) for n in names])
        blocks = "\n\\newblock ".join([_period(authors), *_body(kind, f, year)])
        lines.append(f"\\bibitem[{short}({year}){tail}]{{{key}}}\n{blocks}\n")
    return "\n".join(lines) + "\n\\end{thebibliography}\n"


def write_bbl(paper_dir: str, out: str) -> None:
    """Rule ``bbl``: ``main.bbl`` for the citations of ``paper_dir``'s main.tex and sections,
    from its refs.bib, where TeX (BibTeX) is not installed."""
    paper = Path(paper_dir)
    tex = [paper / "main.tex", *sorted((paper / "sections").glob("*.tex"))]
    entries = parse_bib((paper / "refs.bib").read_text(encoding="utf-8"))
    write_text(out, render_bbl(entries, cited_keys(tex)))
