"""The arXiv tarball (pillm.paper.build.pack_arxiv): every member readable by anyone, whatever
modes the source and build trees had."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from pillm.paper.build import pack_arxiv


def test_members_are_0644_files_and_0755_folders(tmp_path: Path):
    build = tmp_path / "build"
    for rel in ("main.tex", "refs.bib", "main.bbl", "sections/intro.tex",
                "generated/tables/t.tex", "generated/figures/f.pdf", "main.aux"):  # fmt: skip
        path = build / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.chmod(path, 0o600)  # what an atomic write (mkstemp) leaves
    os.chmod(build / "generated", 0o700)
    bbl = build / "main.bbl"
    pack_arxiv(str(build), str(build / "generated"), str(bbl), str(tmp_path / "arxiv.tar.gz"))
    with tarfile.open(tmp_path / "arxiv.tar.gz") as tar:
        members = tar.getmembers()
    files = {m.name: m.mode for m in members if m.isfile()}
    dirs = {m.name: m.mode for m in members if m.isdir()}
    assert "main.bbl" in files and "generated/tables/t.tex" in files
    assert "refs.bib" not in files and "main.aux" not in files
    assert set(files.values()) == {0o644}, files
    assert set(dirs.values()) == {0o755}, dirs
