"""The probe study's commands: one probe job per model and corpus, aggregation, tables, figures."""

from pillm.core.commands import NUMBERS, OUT_DIR, OWN, SUMMARY, TEMPLATES, Command, js, many, req

COMMANDS: tuple[Command, ...] = (
    Command(
        "probe", "pillm.probe.run:probe_job",
        "R²_lin probe of one model's FFN blocks on one corpus",
        (req("--model", "pillm-s<seed>, minilm, smollm2 or a hub name"), req("--corpus"),
         req("--corpus-dir", "prepare_corpus output (test/valid text)"),
         js(help="the config's probe section"), *OWN, OUT_DIR),
        ("model", "corpus", "corpus_dir", "params", "device", "out_dir", "checkpoint",
         "tokenizer"),
        device=True, threads=True,
    ),
    Command(
        "probe-aggregate", "pillm.probe.report:aggregate_probe",
        "stack every probe job into summary parquet and the probe claim frame",
        (many("--blocks"), many("--gradients"), many("--metrics"), OUT_DIR,
         js(help="main_corpus, bootstrap_resamples, min_blocks"),
         req("--claims", "summary/claims/probe.parquet")),
        ("blocks", "gradients", "metrics", "out_dir", "params", "claims"),
    ),
    Command(
        "probe-tables", "pillm.probe.report:render_probe_tables",
        "probe tables and probe_numbers.tex",
        (SUMMARY, js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "probe-figures", "pillm.probe.figures:probe_figures", "probe figures (pdf + png)",
        (SUMMARY, OUT_DIR), ("summary_dir", "out_dir"),
    ),
)  # fmt: skip
