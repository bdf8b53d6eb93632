"""The LM study's commands: runs, their extras, aggregation, tables, figures, the sensitivity grid."""

from pillm.core.commands import (
    NUMBERS,
    OUT_DIR,
    PDF_PNG,
    SUMMARY,
    TEMPLATES,
    Arg,
    Command,
    deps_map,
    js,
    many,
    req,
    section,
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "run-lm", "pillm.lm.run:run_many",
        "build runs of one LM variant (train and/or solve) in one process, evaluate them",
        (req("--variant"), Arg("--seeds", {"type": int, "nargs": "+", "required": True}),
         req("--tokens-dir"),
         Arg("--deps", {"nargs": "*", "default": [],
                        "help": "VARIANT=DIR: the folder of seed<k> runs it builds on"}),
         js(help="{model, train, pil} (JSON), or a list of them, one per run"),
         many("--out-dirs", "one run folder per seed")),
        ("variant", "seeds", "params", "tokens_dir", deps_map, "out_dirs", "device"),
        device=True, threads=True,
    ),
    Command(
        "lm-extras", "pillm.lm.run:run_extras",
        "LAMBADA last-word accuracy and generation samples of finished runs",
        (many("--run-dirs"), req("--tokens-dir"), js(help="{data, lambada, samples} (JSON)")),
        ("run_dirs", "tokens_dir", "params", "device"),
        device=True, threads=True,
    ),
    Command(
        "aggregate", "pillm.lm.aggregate:aggregate",
        "collect run records into summary parquet files",
        (many("--metrics"), many("--curves"), many("--solves"), many("--samples"),
         js(help="{variants, seeds, trained_margin} (JSON)"), OUT_DIR),
        ("metrics", "curves", "solves", "samples", section("variants"), section("seeds"),
         section("trained_margin"), "out_dir"),
    ),
    Command(
        "tables", "pillm.lm.report:render_tables",
        "render LaTeX tables and numbers.tex",
        (SUMMARY, req("--tokens-meta"), js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "tokens_meta", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "figure-curves", "pillm.lm.figures:training_curves", "training-curve figure",
        (req("--curves"), *PDF_PNG), ("curves", "pdf", "png"),
    ),
    Command(
        "figure-lambda", "pillm.lm.figures:lambda_sweep", "λ-sweep figure of the PIL solves",
        (req("--solves"), *PDF_PNG), ("solves", "pdf", "png"),
    ),
    Command(
        "figure-width", "pillm.lm.figures:feature_width",
        "feature-width figure of the refitted FFNs",
        (req("--summary"), *PDF_PNG), ("summary", "pdf", "png"),
    ),
    Command(
        "sensitivity", "pillm.lm.sensitivity:sensitivity_report",
        "lr x dropout grid of the contribution share: summaries, table, Sens macros",
        (many("--metrics"), req("--tokens-meta"), js(help="the config's sensitivity section"),
         TEMPLATES, OUT_DIR, req("--table"), NUMBERS),
        ("metrics", "tokens_meta", "params", "templates", "out_dir", "table", "numbers"),
    ),
)  # fmt: skip
