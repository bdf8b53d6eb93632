"""The SAFFU study's commands: one job per setting, fraction and seed, the n-gram baseline, aggregation, tables, figures."""

from pillm.core.commands import (
    NUMBERS,
    OUT_DIR,
    SUMMARY,
    TEMPLATES,
    Arg,
    Command,
    js,
    many,
    opt,
    req,
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "saffu", "pillm.saffu.run:run_saffu",
        "one SAFFU setting at one train fraction: warm and cold start, every seed",
        (req("--setting", "a key of saffu.settings"),
         Arg("--fraction", {"type": float, "required": True, "help": "train fraction (0, 1]"}),
         req("--tokens-dir"), js(help="pillm.saffu.plan.saffu_job_params (JSON)"), OUT_DIR,
         opt("--rates-from", "metrics.json of the job whose chosen rates to reuse")),
        ("setting", "fraction", "params", "tokens_dir", "out_dir", "device", "rates_from"),
        device=True, threads=True,
    ),
    Command(
        "saffu-kn", "pillm.saffu.kn_job:run_kneser_ney",
        "interpolated Kneser-Ney n-gram baseline on the SAFFU train windows",
        (js(help="{kn, fractions, seeds} (JSON)"), req("--tokens-dir"), OUT_DIR),
        ("params", "tokens_dir", "out_dir"),
    ),
    Command(
        "saffu-aggregate", "pillm.saffu.aggregate:aggregate_saffu",
        "stack every SAFFU run into summary parquet and the SAFFU claim frame",
        (many("--metrics"), many("--curves"), req("--kn-metrics"),
         js(help="{settings, main_setting, inits, fractions, seeds, ablation_seeds} (JSON)"),
         OUT_DIR, req("--claims", "summary/claims/saffu.parquet")),
        ("metrics", "curves", "kn_metrics", "params", "out_dir", "claims"),
    ),
    Command(
        "saffu-tables", "pillm.saffu.tables:render_saffu_tables",
        "SAFFU tables and saffu_numbers.tex",
        (SUMMARY, opt("--lm-summary", "lm.parquet: the GPT baseline and PIL rows beside SAFFU"),
         js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "lm_summary", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "saffu-figures", "pillm.saffu.figures:saffu_figures", "SAFFU figures (pdf + png)",
        (SUMMARY, req("--main-setting"), OUT_DIR), ("summary_dir", "main_setting", "out_dir"),
    ),
)  # fmt: skip
