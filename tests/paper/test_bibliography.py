"""paper/refs.bib holds each work once (no second key for one title, DOI or arXiv id: natbib
would print the same paper twice as 2023a and 2023c), and every key the manuscript cites."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIB = ROOT / "paper" / "refs.bib"
TEX = [ROOT / "paper" / "main.tex", *sorted((ROOT / "paper" / "sections").glob("*.tex"))]


def entries(text: str) -> dict[str, dict[str, str]]:
    """{key: {field: value}} of a .bib text (braced or quoted values, nested braces)."""
    out: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        if m.group(1).lower() in ("comment", "string", "preamble"):
            continue
        i, depth = m.end(), 1
        while depth and i < len(text):  # the entry ends where its opening brace closes
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end() : i - 1]
        fields = {}
        for f in re.finditer(r"(\w+)\s*=\s*", body):
            j = f.end()
            if body[j : j + 1] == "{":
                k, d = j + 1, 1
                while d and k < len(body):
                    d += {"{": 1, "}": -1}.get(body[k], 0)
                    k += 1
                fields[f.group(1).lower()] = body[j + 1 : k - 1]
            elif body[j : j + 1] == '"':
                fields[f.group(1).lower()] = body[j + 1 : body.index('"', j + 1)]
        assert m.group(2) not in out, f"refs.bib: key {m.group(2)} defined twice"
        out[m.group(2)] = fields
    return out


def identities(fields: dict[str, str]) -> list[str]:
    """What names one work: its normalised title, DOI and arXiv id, wherever a field holds it."""
    ids = []
    if "title" in fields:
        ids.append("title:" + re.sub(r"[^a-z0-9]", "", fields["title"].lower()))
    if "doi" in fields:
        ids.append("doi:" + fields["doi"].strip().lower().removeprefix("https://doi.org/"))
    text = " ".join(fields.values())
    ids += {f"arxiv:{a}" for a in re.findall(r"(?:arXiv:|arxiv\.org/abs/)(\d{4}\.\d{4,5})", text)}
    if fields.get("archiveprefix", "").lower() == "arxiv" and "eprint" in fields:
        ids.append(f"arxiv:{fields['eprint'].strip()}")
    return ids


def duplicates(text: str) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for key, fields in entries(text).items():
        for ident in set(identities(fields)):
            seen[ident].append(key)
    return {ident: keys for ident, keys in seen.items() if len(keys) > 1}


def test_every_work_is_in_the_bibliography_once():
    dups = duplicates(BIB.read_text())
    assert not dups, (
        f"paper/refs.bib has one work under several keys: {dups}; keep one key and cite it "
        "everywhere"
    )


def test_every_cited_key_is_in_the_bibliography():
    keys = set(entries(BIB.read_text()))
    cited = set()
    for path in TEX:
        text = re.sub(r"(?<!\\)%.*", "", path.read_text())
        for group in re.findall(r"\\cite[tp]?\*?(?:\[[^\]]*\])*\{([^}]*)\}", text):
            cited |= {k.strip() for k in group.split(",") if k.strip()}
    assert cited and not cited - keys, f"cited but not in refs.bib: {sorted(cited - keys)}"


def test_check_finds_a_duplicate_by_title_doi_or_arxiv_id():
    bib = """
@misc{a2023, title = {Explicit {Foundation} Model Optimization}, howpublished = {arXiv preprint arXiv:2311.07510}, year = {2023}}
@article{b2023, title = {Explicit foundation model optimization}, journal = {arXiv}, year = {2023}}
@article{c2023, title = {Another Title}, eprint = {2311.07510}, archivePrefix = {arXiv}}
@article{d2020, title = {Third}, doi = {10.1/X}}
@article{e2020, title = {Fourth}, doi = {https://doi.org/10.1/x}}
@article{f2020, title = {Fifth}}
"""  # noqa: E501
    dups = duplicates(bib)
    assert sorted(dups["title:explicitfoundationmodeloptimization"]) == ["a2023", "b2023"]
    assert sorted(dups["arxiv:2311.07510"]) == ["a2023", "c2023"]
    assert sorted(dups["doi:10.1/x"]) == ["d2020", "e2020"]
    assert not any("f2020" in keys for keys in dups.values())
