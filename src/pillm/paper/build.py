"""Build the PDF with latexmk and pack a self-contained arXiv tarball."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from pillm.core.records import atomic_path

SOURCES = ("main.tex", "refs.bib", "sections", "generated")
TEX_HINT = (
    "latexmk/pdflatex not found. Install TeX Live, e.g. on Debian/Ubuntu: apt-get install "
    "texlive-latex-base texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended "
    "latexmk. Tables and figures are already built under paper/generated/."
)


class TexMissing(RuntimeError):
    pass


def require_tex() -> None:
    if not (shutil.which("latexmk") and shutil.which("pdflatex")):
        raise TexMissing(TEX_HINT)


def stage_sources(paper_dir: Path, build_dir: Path) -> None:
    """Copy the manuscript sources into a clean build directory (the source tree stays clean)."""
    if build_dir.exists():
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True)
    for name in SOURCES:
        src = paper_dir / name
        if src.is_dir():
            shutil.copytree(src, build_dir / name)
        elif src.is_file():
            shutil.copy2(src, build_dir / name)
        else:
            raise FileNotFoundError(f"paper source {src} is missing")


def latexmk(build_dir: Path, log_path: Path | None = None) -> None:
    require_tex()
    cmd = [
        "latexmk",
        "-pdf",
        "-interaction=nonstopmode",
        "-halt-on-error",
        "-file-line-error",
        "main.tex",
    ]
    proc = subprocess.run(cmd, cwd=build_dir, capture_output=True, text=True)
    if log_path is not None:
        log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RuntimeError(f"latexmk failed in {build_dir} (see main.log there):\n{tail}")


def build_pdf(paper_dir: str, build_dir: str, out_pdf: str) -> None:
    paper, build = Path(paper_dir), Path(build_dir)
    stage_sources(paper, build)
    latexmk(build)
    with atomic_path(out_pdf) as tmp:
        shutil.copy2(build / "main.pdf", tmp)


def pack_arxiv(build_dir: str, out_tar: str) -> None:
    """Tarball of the built sources plus main.bbl (arXiv does not run bibtex)."""
    build = Path(build_dir)
    if not (build / "main.bbl").is_file():
        raise FileNotFoundError(f"{build / 'main.bbl'} missing: build the PDF first")
    members = [*SOURCES, "main.bbl"]
    with atomic_path(out_tar) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for name in members:
            if name == "refs.bib":
                continue  # the .bbl replaces it; arXiv compiles without bibtex
            tar.add(build / name, arcname=name, filter=_drop_aux)


def _drop_aux(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if info.name.endswith((".aux", ".log", ".png")) else info


def compile_unpacked(tar_path: str, work_dir: str) -> Path:
    """Unpack an arXiv tarball and compile it with pdflatex alone, as arXiv does; return the PDF."""
    require_tex()
    work = Path(work_dir)
    with tarfile.open(tar_path) as tar:
        tar.extractall(work, filter="data")
    for _ in range(2):
        proc = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main.tex"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"arXiv tarball failed to compile:\n{proc.stdout[-3000:]}")
    return work / "main.pdf"
