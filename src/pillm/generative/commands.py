"""The generative study's commands: feature classifiers, learning-rate grids, fits, aggregation, tables, figures."""

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
        "gen-classifier", "pillm.generative.classifier:classifier_job",
        "train the feature CNN sample quality is scored in",
        (req("--dataset"), js(help="the config's generative section"),
         req("--images", "gen-images output"), OUT_DIR),
        ("dataset", "params", "images", "device", "out_dir"),
        device=True, threads=True,
    ),
    Command(
        "gen-lr-run", "pillm.generative.tuning:lr_run_job",
        "train one arm pair's AdamW setting at one rate of its learning-rate grid",
        (req("--dataset"), req("--family", "one of pillm.generative.plan.FAMILIES"),
         Arg("--lr", {"type": float, "required": True}),
         js(help="the config's generative section"), req("--images", "gen-images output"),
         req("--out", "the run's json")),
        ("dataset", "family", "lr", "params", "images", "device", "out"),
        device=True, threads=True,
    ),
    Command(
        "gen-lr-pick", "pillm.generative.tuning:lr_pick_job",
        "pick AdamW's learning rate of one arm pair from its grid runs (held-out images)",
        (many("--runs"), OUT_DIR),
        ("runs", "out_dir"),
    ),
    Command(
        "generative", "pillm.generative.run:generative_job",
        "fit one generative setting from one seed on one dataset, score samples",
        (req("--dataset"), req("--setting", "a name from pillm.generative.plan.settings"),
         Arg("--seed", {"type": int, "required": True}),
         js(help="the config's generative section"), req("--images", "gen-images output"),
         req("--classifier", "gen-classifier's classifier.pt"),
         opt("--lr", "gen-lr-pick's lr.json (AdamW settings)"), OUT_DIR),
        ("dataset", "setting", "seed", "params", "images", "classifier", "lr", "device",
         "out_dir"),
        device=True, threads=True,
    ),
    Command(
        "gen-aggregate", "pillm.generative.aggregate:aggregate_generative",
        "stack every generative job into summary parquet and the claim frame",
        (many("--metrics"), many("--curves"), many("--samplers"), many("--classifiers"),
         many("--lr-picks"), many("--lr-curves"), OUT_DIR, req("--claims")),
        ("metrics", "curves", "samplers", "classifiers", "lr_picks", "lr_curves", "out_dir",
         "claims"),
    ),
    Command(
        "gen-tables", "pillm.generative.tables:render_gen_tables",
        "generative tables and gen_numbers.tex",
        (SUMMARY, js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "gen-figures", "pillm.generative.figures:gen_figures", "generative figures (pdf + png)",
        (SUMMARY, req("--results-dir", "results/<name>/generative (sample grids)"), OUT_DIR),
        ("summary_dir", "results_dir", "out_dir"),
    ),
)  # fmt: skip
