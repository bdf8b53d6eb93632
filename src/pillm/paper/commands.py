"""The paper layer's commands: claims, provenance, timing macros, the PDF, the arXiv tarball, the
results page, and ``diff`` (by hand)."""

import json
import os
import shlex
from typing import Any

from pillm.core.commands import NUMBERS, TEMPLATES, Arg, Command, js, many, opt, req

COMMANDS: tuple[Command, ...] = (
    Command(
        "claims", "pillm.paper.claim_report:claims_job",
        "evaluate paper/claims/*.yaml: claims parquet, macros, appendix table, flip report",
        (many("--frames"), req("--tokens-meta"), many("--claims"),
         js(help="{name} (JSON)"), TEMPLATES, req("--out"), req("--table"), NUMBERS,
         req("--flips-tex"), req("--flips-txt"),
         req("--history", "append-only verdict history (not a Snakemake output)")),
        ("frames", "tokens_meta", "claims", "params", "templates", "out", "table", "numbers",
         "flips_tex", "flips_txt", "history"),
        user_errors=("pillm.paper.claims:ClaimsError",),
    ),
    Command(
        "provenance", "pillm.paper.build:write_provenance",
        "provenance.tex: the build's git revision, runs from modified trees, devices",
        (many("--summaries", "summary parquet files whose runs the paper reports"), TEMPLATES,
         NUMBERS),
        ("summaries", "templates", "numbers"),
    ),
    Command(
        "timing-macros", "pillm.paper.build:write_timing",
        "timing_numbers.tex from the build's solve-against-AdamW timing (rule solve_timing)",
        (req("--record", "solve_timing's JSON"), TEMPLATES, NUMBERS),
        ("record", "templates", "numbers"),
    ),
    Command(
        "pdf", "pillm.paper.build:build_pdf", "build the paper PDF with latexmk",
        (req("--paper-dir"), req("--build-dir"), req("--out")),
        ("paper_dir", "build_dir", "out"),
        user_errors=("pillm.paper.build:TexMissing",),
    ),
    Command(
        "bbl", "pillm.paper.bbl:write_bbl",
        "main.bbl from refs.bib and the sources' citations, as BibTeX (plainnat) writes it",
        (req("--paper-dir"), req("--out")), ("paper_dir", "out"),
    ),
    Command(
        "arxiv", "pillm.paper.build:pack_arxiv",
        "pack the arXiv tarball: the manuscript, its generated files and main.bbl",
        (req("--paper-dir"), req("--generated-dir"), req("--bbl"), req("--out")),
        ("paper_dir", "generated_dir", "bbl", "out"),
    ),
    Command(
        "results-page", "pillm.paper.results_page:write_results_page",
        "report/index.html: claims with verdicts, then each wing's tables and captioned figures",
        (req("--claims", "summary/claims.parquet"), req("--flips", "summary/claims_flips.txt"),
         many("--tables", "tables' .tex (the .html beside each is read)"),
         many("--figures", "figures' .png"),
         many("--captions", "workflow/report/captions/<wing>.yaml"),
         js(help="{name, sections: {wing: {tables: [stem], figures: [stem]}}} (JSON)"),
         req("--out")),
        ("claims", "flips", "tables", "figures", "captions", "params", "out"),
        user_errors=("pillm.paper.results_page:ResultsPageError",),
    ),
    # -- by hand
    Command(
        "diff", "pillm.paper.diff:diff_command",
        "what changed between two builds: metrics beyond seed noise, flipped claims, moved cells",
        (Arg("a", {"help": "build A: a results folder (results/<name>) or REV:PATH in git"}),
         Arg("b", {"help": "build B: the same forms"}),
         opt("--html", "also write the changes as a highlighted HTML page here"),
         Arg("--sigmas", {"type": float, "default": 2.0,
                          "help": "list a change above this many standard errors (default 2)"}),
         Arg("--rel", {"type": float, "default": 0.01,
                       "help": "one seed on a side: list a relative change above this (0.01)"}),
         Arg("--repo", {"default": ".", "help": "git repository of REV:PATH builds"})),
        ("a", "b", "html", "sigmas", "rel", "repo"),
        user_errors=("pillm.paper.diff:DiffInputError",), rule=False,
    ),
)  # fmt: skip


def claims_args(name: str, labels: dict, history: str, input: Any, output: Any) -> str:
    """The ``claims`` rule's arguments from its named inputs and outputs: the config ``name``,
    the studies' arm ``labels`` and the append-only verdict ``history`` (not an output)."""
    params = shlex.quote(json.dumps({"name": name, "labels": labels}, sort_keys=True))
    return (
        f"--frames {' '.join(input.frames)} --tokens-meta {input.tokens_meta}"
        f" --claims {' '.join(input.claims)} --params {params}"
        f" --templates {os.path.dirname(input.templates[0])} --out {output.parquet}"
        f" --table {output.table} --numbers {output.numbers} --flips-tex {output.flips_tex}"
        f" --flips-txt {output.flips_txt} --history {history}"
    )
