"""The generated docs (pillm.docs_gen) are what their sources give now, and every link between
the reference pages points at a file and an anchor that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pillm import docs_gen
from pillm.plan import STUDIES

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    return docs_gen.generated(REPO)


def test_committed_pages_equal_the_generated_ones(generated):
    stale = [str(p.relative_to(REPO)) for p, text in generated.items()
             if not p.is_file() or p.read_text() != text]  # fmt: skip
    assert not stale, f"{stale} differ from their sources: run `python -m pillm.docs_gen`"


def test_check_mode_agrees(capsys):
    assert docs_gen.main(["--check"]) == 0, capsys.readouterr().err


def test_configuration_page_has_every_schema_key(generated):
    page = generated[DOCS / "configuration.md"]
    schema = docs_gen.plan.schema(REPO / "config" / "schema.yaml")
    for key, _ in docs_gen.leaves(schema):
        assert f"`{key}`" in page, f"docs/configuration.md lacks {key}"


def test_every_study_has_a_page_with_its_claims():
    for study in STUDIES:
        page = DOCS / "experiments" / f"{study}.md"
        assert page.is_file(), f"add docs/experiments/{study}.md (see docs/add-an-experiment.md)"
        assert "<!-- BEGIN GENERATED: claims -->" in page.read_text(), page
        assert study in docs_gen.STUDY_SECTIONS, f"add {study} to docs_gen.STUDY_SECTIONS"


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        ids.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return ids


def test_links_between_docs_resolve():
    bad = []
    for page in [*DOCS.glob("*.md"), *DOCS.glob("experiments/*.md")]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http", "#")):
                continue
            file, _, frag = target.partition("#")
            dest = (page.parent / file).resolve()
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{page.name}: {target} (no such anchor)")
    assert not bad, "\n".join(bad)
