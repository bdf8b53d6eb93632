"""The results page (pillm.paper.results_page): claims first, one section per wing, every figure
inline under its own caption, and a clear error where a caption is missing."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from pillm.paper.results_page import (
    ResultsPageError,
    load_captions,
    page_html,
    write_results_page,
)

REPO = Path(__file__).resolve().parents[2]
CAPTIONS = sorted((REPO / "workflow/report/captions").glob("*.yaml"))
FIXTURE = REPO / "tests/data/results_page"
CLAIMS = REPO / "tests/data/paper_build_summary/claims.parquet"
# The fixture's tables (HTML written by pillm.paper.html in a smoke build), by wing.
TABLES = {
    "lm": ["lm_main"],
    "sensitivity": ["lm_sensitivity"],
    "probe": ["probe_summary"],
    "generative": ["gen_main"],
    "lora": ["lora"],
    "saffu": ["saffu", "saffu_sizes"],
}


def make_png(path: Path, label: str) -> Path:
    """A small real figure (4 x 3 in at 100 dpi), as the studies' figure rules write them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1, 2], [2, 1, 1.5], marker="o")
    ax.set_title(label)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def page_inputs(tmp: Path) -> dict:
    """Arguments of write_results_page: every wing with a captions file, a figure per caption."""
    captions = load_captions(CAPTIONS)
    (tmp / "tables").mkdir()
    (tmp / "figures").mkdir()
    sections, tables, figures = {}, [], []
    order = [*TABLES, *sorted(set(captions) - set(TABLES))]  # the workflow's, not alphabetical
    for wing in order:
        cap = captions[wing]
        names = TABLES.get(wing, [])
        for t in names:
            (tmp / "tables" / f"{t}.html").write_text(
                (FIXTURE / "tables" / f"{t}.html").read_text()
            )
            tables.append(str(tmp / "tables" / f"{t}.tex"))
        for f in cap["figures"]:
            figures.append(str(make_png(tmp / "figures" / f"{f}.png", f)))
        sections[wing] = {"tables": names, "figures": list(cap["figures"])}
    flips = tmp / "flips.txt"
    flips.write_text("no claim flipped\n")
    return {
        "claims": str(CLAIMS), "flips": str(flips), "tables": tables, "figures": figures,
        "captions": [str(p) for p in CAPTIONS], "params": {"name": "smoke", "sections": list(sections.items())},
        "out": str(tmp / "report" / "index.html"),
    }  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict, str]:
    args = page_inputs(tmp_path_factory.mktemp("page"))
    write_results_page(**args)
    return args, Path(args["out"]).read_text()


def test_page_opens_on_the_claims(built):
    args, page = built
    claims = pl.read_parquet(CLAIMS)
    first_section = page.index('class="study"')
    assert page.index('id="claims-table"') < first_section
    rows = re.findall(r'<tr id="claim-([^"]+)">', page)
    assert sorted(rows) == sorted(claims["id"].to_list())
    # a study's claims come in its section's order: lm (first section) before probe
    studies = [s for s in claims["study"].to_list() if s in dict(args["params"]["sections"])]
    order = list(dict(args["params"]["sections"]))
    page_studies = [claims.filter(pl.col("id") == r)["study"][0] for r in rows]
    assert page_studies == sorted(page_studies, key=lambda s: order.index(s) if s in order else 99)
    assert set(studies) <= set(page_studies)
    for verdict in claims["verdict"].unique():
        assert f">{verdict}</span>" in page


def test_intervals_and_differences_are_shown(built):
    _, page = built
    claims = pl.read_parquet(CLAIMS).filter(pl.col("ci_lo").is_not_null())
    assert claims.height, "the fixture should have a claim with an interval"
    r = claims.row(0, named=True)
    assert f"[{r['ci_lo']:.4g}, {r['ci_hi']:.4g}]" in page
    assert f"<td>{r['diff']:.4g}</td>" in page


def test_every_wing_is_a_section_with_its_tables(built):
    args, page = built
    sections = re.findall(r'<section id="([^"]+)" class="study">', page)
    assert sections == list(dict(args["params"]["sections"]))
    for names in TABLES.values():
        for t in names:
            body = (FIXTURE / "tables" / f"{t}.html").read_text()
            table_id = re.search(r'<table id="([^"]+)"', body).group(1)
            assert f'<table id="{table_id}"' in page


def test_each_figure_is_inline_under_its_own_caption(built):
    args, page = built
    captions = load_captions(CAPTIONS)
    figures = re.findall(
        r'<figure id="fig-([^"]+)"><img alt="[^"]*" src="data:image/png;base64,[A-Za-z0-9+/=]+">'
        r"<figcaption><b>[^<]+</b> ([^<]+)</figcaption>",
        page,
    )
    assert [f for f, _ in figures] == [Path(p).stem for p in args["figures"]]
    texts = [c for _, c in figures]
    assert len(set(texts)) == len(texts), "two figures share a caption"
    for stem, text in figures:
        wing = next(w for w, c in captions.items() if stem in c["figures"])
        assert text == captions[wing]["figures"][stem].replace("'", "&#x27;")


def test_page_is_self_contained(built):
    _, page = built
    assert "<style>" in page and "<link" not in page and "<script" not in page
    external = re.findall(r'(?:src|href)="(?!#|data:)([^"]*)"', page)
    assert external == ["../paper/main.pdf"]


def test_a_figure_without_a_caption_names_the_file_and_key(tmp_path):
    args = page_inputs(tmp_path)
    extra = make_png(tmp_path / "figures" / "lora_new_plot.png", "new")
    args["figures"].append(str(extra))
    dict(args["params"]["sections"])["lora"]["figures"].append("lora_new_plot")  # same dict
    with pytest.raises(ResultsPageError, match=r"captions/lora\.yaml .*lora_new_plot"):
        write_results_page(**args)


def test_a_section_without_a_captions_file_is_named():
    with pytest.raises(ResultsPageError, match="scaling"):
        page_html("x", pl.read_parquet(CLAIMS), "", {"scaling": {}}, {}, {}, {})


def test_captions_files_declare_title_question_and_open_tables():
    for path in CAPTIONS:
        data = yaml.safe_load(path.read_text())
        assert data["title"] and data["question"], path
        assert isinstance(data["tables"], list) and isinstance(data["figures"], dict), path


def test_every_figure_the_workflow_places_has_a_caption(tmp_path):
    """The results_page rule's sections (a dry run of the smoke config): each wing has its
    captions file, each figure its caption, and every caption belongs to a placed figure."""
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--configfile",
         str(REPO / "config/smoke.yaml"), "-d", str(tmp_path), "results_page"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(ln for ln in out.stdout.splitlines() if "pillm results-page" in ln)
    words = shlex.split(line)
    sections = dict(json.loads(words[words.index("--params") + 1])["sections"])
    captions = load_captions(CAPTIONS)
    assert set(sections) == set(captions), "one captions file per wing on the page"
    assert list(sections)[:2] == ["lm", "sensitivity"], "sections in the wings' order"
    for wing, files in sections.items():
        assert set(files["figures"]) == set(captions[wing]["figures"]), wing
        assert set(captions[wing]["tables"]) <= set(files["tables"]), wing


def test_sections_come_from_the_wings_registrations():
    from pillm.paper.results_page import page_sections, stems

    wings = {
        "lm": {"paper": [["g/tables/lm_main.tex", "g/numbers.tex"], "g/figures/curves.pdf"]},
        "sensitivity": {"paper": ["g/tables/lm_sensitivity.tex", "g/sensitivity_numbers.tex"]},
        "paper": {"paper": ["g/tables/claims.tex"]},
    }
    sections = page_sections(wings)
    assert sections == {
        "lm": {"tables": ["g/tables/lm_main.tex"], "figures": ["g/figures/curves.png"]},
        "sensitivity": {"tables": ["g/tables/lm_sensitivity.tex"], "figures": []},
    }
    assert stems(sections) == [
        ["lm", {"tables": ["lm_main"], "figures": ["curves"]}],
        ["sensitivity", {"tables": ["lm_sensitivity"], "figures": []}],
    ]


def test_every_verdict_has_a_badge_colour():
    from pillm.paper import verdicts
    from pillm.paper.results_page import VERDICT_CLASS

    declared = {
        v for k, v in vars(verdicts).items() if k.isupper() and isinstance(v, str)
        and not k.endswith("_METRIC") and k not in ("GUARDS",)
    }  # fmt: skip
    assert declared - set(VERDICT_CLASS) == set()
