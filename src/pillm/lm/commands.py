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

# The scaling study (lm/scaling*.py, workflow/rules/scaling.smk): width, depth and data axes.
TOKENS = many("--tokens", "a tokens folder's splits and meta.json (their folder is read)")
COMMANDS = COMMANDS + (
    Command(
        "scaling-tokens", "pillm.lm.scaling_run:subset_tokens",
        "a scaling point's token splits: a train fraction, evaluation splits capped or whole",
        (TOKENS, js(help="{fraction, eval_tokens} (JSON)"), many("--out", "the splits written")),
        ("tokens", "params", "out"),
    ),
    Command(
        "scaling-point", "pillm.lm.scaling_run:run_point",
        "every run of one scaling point in one process: rate search per family, then all seeds",
        (js(help="pillm.lm.scaling.point_params (JSON)"), TOKENS, req("--runs"), req("--curves"),
         req("--lr", "the rate search's record; the run folders go beside it")),
        ("params", "tokens", "runs", "curves", "lr", "device"),
        device=True, threads=True,
    ),
    Command(
        "scaling-cost", "pillm.lm.scaling_cost:measure_cost",
        "the PIL solve against FFN-only AdamW, timed at every scaling width on one device",
        (js(help="pillm.lm.scaling.cost_params (JSON)"), TOKENS, req("--out")),
        ("params", "tokens", "out", "device"),
        device=True, threads=True,
    ),
    Command(
        "scaling-cost-warm", "pillm.lm.scaling_cost:warm_cost",
        "scaling-cost's warm-ups of every width, untimed: its compiled steps in the host's cache",
        (js(help="pillm.lm.scaling.cost_params (JSON)"), TOKENS, req("--out")),
        ("params", "tokens", "out", "device"),
        device=True, threads=True,
    ),
    Command(
        "scaling-report", "pillm.lm.scaling_report:scaling_report",
        "scaling summaries, claim frame, tables and Scal macros",
        (many("--lrs", "every point's lr.json (runs.parquet, curves.parquet beside it)"),
         many("--tokens-metas"), req("--cost"), js(help="pillm.lm.scaling.report_params (JSON)"),
         many("--templates", "the shared templates (their folder is read)"),
         req("--summary", "the run summary; the other summaries go beside it"),
         req("--claims"), many("--tables"), NUMBERS),
        ("lrs", "tokens_metas", "cost", "params", "templates", "summary", "claims", "tables",
         "numbers"),
    ),
    Command(
        "scaling-figures", "pillm.lm.scaling_figures:scaling_figures",
        "width, depth and data figures of the scaling study",
        (req("--summary", "scaling-report's run summary (the others beside it)"), req("--main"),
         many("--pdfs"), many("--pngs")),
        ("summary", "main", "pdfs", "pngs"),
    ),
)  # fmt: skip
