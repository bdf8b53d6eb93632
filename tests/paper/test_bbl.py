"""main.bbl without TeX (pillm.paper.bbl): the arXiv sources' bibliography, as BibTeX with
plainnat writes it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pillm.paper.bbl import cited_keys, parse_bib, render_bbl, sentence_case, write_bbl

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "paper"
TEX_FILES = [PAPER / "main.tex", *sorted((PAPER / "sections").glob("*.tex"))]


def entries_of(bbl: str) -> list[str]:
    """The entries with BibTeX's line breaks undone."""
    return [" ".join(item.split()) for item in bbl.split("\\bibitem")]


def test_every_cited_key_is_in_refs_bib_and_gets_an_author_year_label(tmp_path):
    write_bbl(str(PAPER), str(tmp_path / "main.bbl"))
    bbl = (tmp_path / "main.bbl").read_text()
    keys = cited_keys(TEX_FILES)
    assert len(keys) > 20 and len(set(keys)) == len(keys)
    assert bbl.startswith(f"\\begin{{thebibliography}}{{{len(keys)}}}")
    for key in keys:
        assert f"]{{{key}}}" in bbl, key
    assert "\\bibitem[Vaswani et~al.(2017)Vaswani, Shazeer, Parmar" in bbl


def test_names_titles_and_letters_follow_bibtex():
    bib = r"""
@article{b, author = {van der Wal, Oskar and Wang, Lu and Hu, Edward J.},
  title = {Scaling {MLPs}: A Tale}, journal = {J}, volume = {5}, number = {2},
  pages = {1-9}, year = {2020}}
@misc{a, author = {Wal, Anna}, title = {One}, howpublished = {arXiv}, year = {2020}}
@misc{c, author = {Wal, Anna}, title = {Two}, howpublished = {arXiv}, year = {2020}}
"""
    bbl = render_bbl(parse_bib(bib), ["b", "c", "a"])
    items = entries_of(bbl)[1:]
    assert items[0].startswith("[van~der Wal et~al.(2020)van~der Wal, Wang, and Hu]{b}")
    assert "Oskar van~der Wal, Lu~Wang, and Edward~J. Hu." in items[0]
    assert "Scaling {MLPs}: A tale." in items[0]
    assert "\\emph{J}, 5\\penalty0 (2):\\penalty0 1--9, 2020." in items[0]
    # the same author and year: letters in sort order (the cite key breaks the tie)
    assert items[1].startswith("[Wal(2020{\\natexlab{a}})]{a}")
    assert items[2].startswith("[Wal(2020{\\natexlab{b}})]{c}")
    assert sentence_case("What Matters? {Not} All") == "What matters? {Not} all"


def test_a_citation_missing_from_the_bib_names_the_key():
    with pytest.raises(KeyError, match="nokey"):
        render_bbl(parse_bib("@misc{a, author={A, B}, title={T}, year={2000}}"), ["nokey"])


@pytest.mark.skipif(shutil.which("bibtex") is None, reason="BibTeX not installed: nothing to "
                    "compare with")  # fmt: skip
def test_equals_bibtex_plainnat_on_the_whole_bibliography(tmp_path):
    """Every entry of refs.bib, cited: the same labels, order and text as BibTeX's (up to its
    line breaks)."""
    shutil.copy(PAPER / "refs.bib", tmp_path / "refs.bib")
    aux = "\\relax\n\\citation{*}\n\\bibstyle{plainnat}\n\\bibdata{refs}\n"
    (tmp_path / "main.aux").write_text(aux)
    subprocess.run(["bibtex", "main"], cwd=tmp_path, capture_output=True, check=True)
    entries = parse_bib((PAPER / "refs.bib").read_text())
    ours = render_bbl(entries, list(entries))
    assert entries_of(ours) == entries_of((tmp_path / "main.bbl").read_text())
