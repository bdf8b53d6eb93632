"""Build the PDF with latexmk and pack a self-contained arXiv tarball."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from collections import Counter
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


# TeX never runs programs here: \write18 is off whatever the TeX installation's default
# (TeX Live's restricted list allows a few programs).
NO_SHELL = "-no-shell-escape"


def check_generated(build_dir: Path) -> None:
    """Every generated ``.tex`` under ``build_dir/generated`` passes ``check_tex``: a string
    that reached one unescaped stops the build before TeX reads it, naming the file."""
    from pillm.paper.latex import check_tex

    for path in sorted((build_dir / "generated").rglob("*.tex")):
        check_tex(path.read_text(encoding="utf-8"), path)


def latexmk(build_dir: Path, log_path: Path | None = None) -> None:
    require_tex()
    cmd = [
        "latexmk",
        "-pdf",
        NO_SHELL,
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


def check_floats(log: str, where: Path) -> None:
    """RuntimeError where LaTeX set a float taller than the page: it prints the float's first
    page and drops the rest, so the PDF would look finished without them."""
    lines = re.findall(r"Float too large for page by ([\d.]+)pt on input line (\d+)", log)
    if lines:
        found = "; ".join(f"{pt} pt too tall (input line {n})" for pt, n in lines)
        raise RuntimeError(
            f"{where}: a float is taller than the page and LaTeX cut it: {found}. Give its table "
            "page_breaks=True (pillm.paper.table.Table: a longtable) or fewer rows"
        )


def build_pdf(paper_dir: str, build_dir: str, out_pdf: str) -> None:
    paper, build = Path(paper_dir), Path(build_dir)
    stage_sources(paper, build)
    check_generated(build)
    latexmk(build)
    check_floats((build / "main.log").read_text(errors="replace"), build / "main.log")
    with atomic_path(out_pdf) as tmp:
        shutil.copy2(build / "main.pdf", tmp)


def pack_arxiv(paper_dir: str, generated_dir: str, bbl: str, out_tar: str) -> None:
    """Tarball of the manuscript (``paper_dir``'s main.tex and sections), its generated tables,
    macros and figures (``generated_dir``) and ``bbl`` as main.bbl: arXiv does not run BibTeX.
    ``bbl``: the PDF build's own where TeX is installed, else ``pillm.paper.bbl``'s; so the
    sources build without TeX."""
    paper = Path(paper_dir)
    members = [(paper / "main.tex", "main.tex"), (paper / "sections", "sections"),
               (Path(generated_dir), "generated"), (Path(bbl), "main.bbl")]  # fmt: skip
    for path, _ in members:
        if not path.exists():
            raise FileNotFoundError(f"arXiv sources: {path} is missing")
    with atomic_path(out_tar) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for path, name in members:  # refs.bib stays out: main.bbl replaces it
            tar.add(path, arcname=name, filter=_drop_aux)


def _drop_aux(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Build leftovers out; every member readable by anyone who unpacks it (files 0644,
    folders 0755), whatever modes the build tree has (atomic writes leave files 0600)."""
    if info.name.endswith((".aux", ".log", ".png")):
        return None
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def compile_unpacked(tar_path: str, work_dir: str) -> Path:
    """Unpack an arXiv tarball and compile it with pdflatex alone, as arXiv does; return the PDF.
    The archive is unpacked with tarfile's ``data`` filter (no links or paths out of
    ``work_dir``, no device files, no set-uid bits) and its generated files checked."""
    require_tex()
    work = Path(work_dir)
    with tarfile.open(tar_path) as tar:
        tar.extractall(work, filter="data")
    check_generated(work)
    for _ in range(2):
        proc = subprocess.run(
            ["pdflatex", NO_SHELL, "-interaction=nonstopmode", "-halt-on-error", "main.tex"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"arXiv tarball failed to compile:\n{proc.stdout[-3000:]}")
    return work / "main.pdf"


# ---- Front matter: provenance of the build and its runs; the isolated timing record ---------

# Columns that tell one run from another in a summary (the rest: metrics and provenance).
RUN_KEYS = ("experiment", "variant", "point", "seed", "model", "method", "setting", "init",
            "dataset", "corpus", "tokenizer", "data_policy")  # fmt: skip
UNKNOWN = "unknown"


def run_provenance(summary_paths: list[str]) -> list[dict[str, str]]:
    """One row per run behind the paper: its git revision and device name (``unknown`` where a
    summary does not record them), from every summary parquet given."""
    import polars as pl

    runs: list[dict[str, str]] = []
    for path in summary_paths:
        df = pl.read_parquet(path)
        keys = [c for c in RUN_KEYS if c in df.columns]
        if not keys:
            raise ValueError(f"{path}: no run identity columns {RUN_KEYS}; not a run summary")
        for col in ("git_rev", "device_name"):
            if col not in df.columns:
                df = df.with_columns(pl.lit(UNKNOWN).alias(col))
        rows = df.select(*keys, "git_rev", "device_name").unique(subset=keys)
        runs += [
            {"git_rev": str(r["git_rev"] or UNKNOWN), "device_name": str(r["device_name"])}
            for r in rows.iter_rows(named=True)
        ]
    return runs


def provenance_macros(build_rev: str, runs: list[dict[str, str]]) -> dict[str, str]:
    """``\\BuildRevision`` (the code that built the paper), ``\\BuildDirty`` (a sentence when the
    build or any run came from a modified tree or recorded no revision; empty when all clean),
    ``\\BuildRuns`` (how many runs, from which revisions) and ``\\BuildDevices``."""
    from pillm.paper.latex import tex_escape

    n = len(runs)
    revs = Counter(r["git_rev"] for r in runs)
    dirty = sum(k for rev, k in revs.items() if rev.endswith("-dirty"))
    unknown = revs.get(UNKNOWN, 0)
    sentences = []
    if build_rev.endswith("-dirty"):
        sentences.append("This paper was built from a modified working tree.")
    elif build_rev == UNKNOWN:
        sentences.append("The code revision that built this paper is unknown.")
    if dirty:
        sentences.append(
            f"{dirty} of {n} runs came from a modified working tree, so their "
            "numbers may not be reproducible from any commit."
        )
    if unknown:
        sentences.append(f"{unknown} of {n} runs recorded no code revision.")
    clean = sorted(rev for rev in revs if rev != UNKNOWN and not rev.endswith("-dirty"))
    listed = ", ".join(f"\\texttt{{{tex_escape(r)}}}" for r in clean)
    # older CPU records say "1 threads": one spelling per device
    names = {re.sub(r"\b1 threads\)", "1 thread)", r["device_name"]) for r in runs}
    devices = sorted(names - {UNKNOWN, "None"})
    return {
        "BuildRevision": f"\\texttt{{{tex_escape(build_rev)}}}",
        "BuildDirty": " ".join(sentences),
        "BuildRuns": f"{n} runs" + (f" (revision {listed})" if listed else ""),
        "BuildDevices": ", ".join(tex_escape(d) for d in devices) or UNKNOWN,
    }


def write_provenance(summary_paths: list[str], template_dir: str, numbers_path: str) -> None:
    """``provenance.tex``: the macros of ``provenance_macros`` for this checkout's revision and
    the runs of ``summary_paths``."""
    from pillm.core.records import git_revision
    from pillm.paper.report import render_report

    macros = provenance_macros(git_revision(), run_provenance(summary_paths))
    render_report({}, macros, template_dir, numbers_path, "pillm provenance from the summaries")


def timing_macros(record: dict) -> dict[str, str]:
    """``\\Timing*`` macros of the build's solve-against-AdamW timing (rule ``solve_timing``, one
    row of ``scaling-cost``): medians and ranges (seconds), the ratio, repeats, shape, device, and
    ``\\TimingSentence`` (the sentence a section quotes), which says whether the job had the device
    to itself."""
    from pillm.paper.latex import fmt_range, fmt_sig, tex_escape

    r = record
    digits = 2 if max(r["solve_s_max"], r["adamw_s_max"]) < 100 else 1
    m = {
        "TimingDevice": tex_escape(r["device_name"]),
        "TimingTorch": tex_escape(r["torch"]),
        "TimingRepeats": str(int(r["repeats"])),
        "TimingSolveS": fmt_sig(r["solve_s"]),
        "TimingSolveRange": fmt_range(r["solve_s_min"], r["solve_s_max"], digits),
        "TimingGradS": fmt_sig(r["adamw_s"]),
        "TimingGradRange": fmt_range(r["adamw_s_min"], r["adamw_s_max"], digits),
        "TimingRatio": fmt_sig(r["adamw_s"] / r["solve_s"], 2),
        "TimingShape": (
            f"{int(r['n_layer'])} layers, $d={int(r['d_model'])}$, context {int(r['context'])}, "
            + f"{int(r['train_tokens_split']):,} train tokens".replace(",", "{,}")
        ),
        "TimingEpochs": str(int(r["epochs"])),
    }
    where = ("with no other job on the device" if r["alone"]
             else "beside its other jobs (so the figures are noisy)")  # fmt: skip
    m["TimingSentence"] = (
        f"In a job of this build on {m['TimingDevice']} {where} "
        f"({m['TimingShape']}; median of {m['TimingRepeats']} repeats, compile and warm-up "
        f"excluded), solving every FFN layer in closed form took {m['TimingSolveS']}~s "
        f"(range {m['TimingSolveRange']}~s) and training the same FFNs with AdamW for "
        f"{m['TimingEpochs']} epoch{'s' * (int(r['epochs']) != 1)} took {m['TimingGradS']}~s "
        f"(range {m['TimingGradRange']}~s)."
    )
    return m


def write_timing(record_path: str, template_dir: str, numbers_path: str) -> None:
    """``timing_numbers.tex``: ``timing_macros`` of the build's ``solve_timing`` record."""
    from pillm.paper.report import render_report

    (record,) = json.loads(Path(record_path).read_text())  # one width: the study's own
    render_report({}, timing_macros(record), template_dir, numbers_path, record_path)
