"""The SST-2 adapter study's commands: one job per base model and method, aggregation, table, figure."""

from pillm.core.commands import (
    NUMBERS,
    OUT_DIR,
    OWN,
    PDF_PNG,
    SUMMARY,
    TEMPLATES,
    Arg,
    Command,
    js,
    many,
    req,
    section,
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "lora", "pillm.lora.run:lora_job",
        "PIL-LoRA / ridge / LoRA on SST-2 for one base model",
        (req("--model", "pillm-s<seed> or minilm-s<seed>"),
         req("--method", "pil_lora, ridge, pil_adapter or lora"),
         js(help="{lora: ..., data: ...} (JSON)"), *OWN, OUT_DIR,
         Arg("--rates", {"nargs": "*", "default": [],
                         "help": "lora: the lora-rate files of its rate search"})),
        ("model", "method", section("lora"), section("data"), "device", "out_dir",
         "checkpoint", "tokenizer", "rates"),
        device=True, threads=True,
    ),
    Command(
        "lora-rate", "pillm.lora.run:rate_job",
        "one rate of LoRA's search on SST-2 for one base model (the lora job reads it)",
        (req("--model", "pillm-s<seed> or minilm-s<seed>"),
         Arg("--lr", {"type": float, "required": True, "help": "the peak learning rate"}),
         js(help="{lora: ..., data: ...} (JSON)"), *OWN, req("--out", "the rate file")),
        ("model", "lr", section("lora"), section("data"), "device", "out",
         "checkpoint", "tokenizer"),
        device=True, threads=True,
    ),
    Command(
        "lora-aggregate", "pillm.lora.report:aggregate_lora",
        "stack every lora job into summary parquet",
        (many("--metrics"), many("--curves"), many("--jobs", "expected MODEL/METHOD jobs"),
         OUT_DIR),
        ("metrics", "curves", "jobs", "out_dir"),
    ),
    Command(
        "lora-tables", "pillm.lora.report:render_lora_tables", "SST-2 table and lora_numbers.tex",
        (SUMMARY, js(), TEMPLATES, req("--table"), NUMBERS),
        ("summary_dir", "params", "templates", "table", "numbers"),
    ),
    Command(
        "lora-figures", "pillm.lora.figures:lora_figure",
        "SST-2 accuracy vs fitting time (pdf + png)",
        (SUMMARY, *PDF_PNG), ("summary_dir", "pdf", "png"),
    ),
)  # fmt: skip
