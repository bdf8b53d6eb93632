"""Command line as a table: one entry per Snakemake rule's ``python -m pillm <command>``.

Each :class:`Command` names the ``module:function`` it runs (imported only when that command
runs, so a report command never imports torch), its flags, and how the parsed flags become the
function's positional arguments. Flags map one-to-one onto arguments except where a small named
adapter below the table says otherwise (a JSON section split into several arguments, ``--deps
A=dir`` into a dict). ``pillm.codedeps`` reads the same table to find the code a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# A positional argument of the entry function: a parsed flag's name, or an adapter of the parse.
Value = str | Callable[[argparse.Namespace], Any]


@dataclass(frozen=True)
class Arg:
    """One flag: its name and argparse's keyword options."""

    flag: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """One subcommand: ``target`` is ``package.module:function``, called with ``passes``.

    ``device`` adds ``--device`` and pins the job to one GPU before anything starts CUDA;
    ``threads`` adds ``--threads`` (torch CPU threads, 0: torch's default). ``user_errors`` are
    ``module:Exception`` names reported as one line and exit status 2 instead of a traceback.
    ``rule``: False for a command people run by hand, which no Snakemake rule runs.
    """

    name: str
    target: str
    help: str
    args: tuple[Arg, ...]
    passes: tuple[Value, ...]
    device: bool = False
    threads: bool = False
    user_errors: tuple[str, ...] = ()
    rule: bool = True

    @property
    def module(self) -> str:
        return self.target.split(":")[0]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--params is not valid JSON: {err}") from err


def req(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"required": True, "help": help})


def opt(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"help": help})


def many(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"nargs": "+", "required": True, "help": help})


def js(flag: str = "--params", help: str | None = None) -> Arg:
    return Arg(flag, {"type": _json, "required": True, "help": help})


# ---- Adapters: flags that are not one argument each ----------------------------------------


def section(key: str, sub: str | None = None) -> Callable[[argparse.Namespace], Any]:
    """``--params``'s ``key`` entry (or its ``sub`` key): one JSON flag, several arguments."""

    def get(ns: argparse.Namespace) -> Any:
        return ns.params[key] if sub is None else ns.params[key][sub]

    get.__name__ = f"params[{key}]" + ("" if sub is None else f"[{sub}]")
    return get


def deps_map(ns: argparse.Namespace) -> dict[str, str]:
    """``--deps VARIANT=RUN_DIR ...`` as {variant: run dir}."""
    return dict(d.split("=", 1) for d in ns.deps)


SUMMARY = req("--summary-dir")
TEMPLATES = req("--templates")
NUMBERS = req("--numbers")
OUT_DIR = req("--out-dir")
PDF_PNG = (req("--pdf"), req("--png"))
OWN = (
    opt("--checkpoint", "pillm models: the baseline's model.pt"),
    opt("--tokenizer", "pillm models: the tokenizer.json it was trained with"),
)

COMMANDS: tuple[Command, ...] = (
    # -- data
    Command(
        "prepare-corpus", "pillm.data.corpus:prepare_corpus",
        "load a corpus (hub or local mirror) into split texts",
        (req("--corpus"), js(help="the config's data section (JSON)"), OUT_DIR),
        ("corpus", section("source"), section("local_dir"), section("heldout_fraction"),
         "out_dir"),
        user_errors=("pillm.data.files:DataError",),
    ),
    Command(
        "mirror", "pillm.data.sources:mirror_job",
        "check the data mirror (data.source auto: build it from the hub when absent)",
        (js(help="the config's data section (JSON)"), req("--out")),
        (section("source"), section("local_dir"), "out"),
        user_errors=("pillm.data.files:DataError",),
    ),
    Command(
        "tokenize", "pillm.data.corpus:tokenize_corpus",
        "tokenize split texts into .npy arrays",
        (req("--corpus-dir"), js(help="{tokenizer: ..., data: ...} (JSON)"), OUT_DIR),
        ("corpus_dir", section("tokenizer", "kind"), section("tokenizer", "vocab_size"),
         section("data", "source"), section("data", "local_dir"), "out_dir"),
    ),
    # -- language models
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
        device=True,
    ),
    Command(
        "lm-extras", "pillm.lm.run:run_extras",
        "LAMBADA last-word accuracy and generation samples of finished runs",
        (many("--run-dirs"), req("--tokens-dir"), js(help="{data, lambada, samples} (JSON)")),
        ("run_dirs", "tokens_dir", "params", "device"),
        device=True,
    ),
    Command(
        "aggregate", "pillm.lm.report:aggregate",
        "collect run records into summary parquet files",
        (many("--metrics"), many("--curves"), many("--solves"), many("--samples"),
         js(help="{variants, seeds} (JSON)"), OUT_DIR),
        ("metrics", "curves", "solves", "samples", section("variants"), section("seeds"),
         "out_dir"),
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
    # -- probe
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
         js(help="main_corpus, bootstrap_resamples"),
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
    # -- generative
    Command(
        "gen-images", "pillm.data.image_files:prepare_images",
        "decode an image dataset's splits into one uint8 .npz",
        # its own --threads (decoding processes): the shared flag sets torch's threads, and
        # importing torch for it would delay every generative job, which waits for this one
        (req("--dataset"), js("--data", "the config's data section"), req("--out"),
         Arg("--threads", {"type": int, "default": 0, "help": "decoding processes (0: one)"})),
        ("dataset", "data", "out", "threads"),
    ),
    Command(
        "gen-classifier", "pillm.generative.run:classifier_job",
        "train the feature CNN sample quality is scored in",
        (req("--dataset"), js(help="the config's generative section"),
         req("--images", "gen-images output"), OUT_DIR),
        ("dataset", "params", "images", "device", "out_dir"),
        device=True, threads=True,
    ),
    Command(
        "gen-lr-run", "pillm.generative.tuning:lr_run_job",
        "train one arm pair's AdamW setting at one rate of its learning-rate grid",
        (req("--dataset"), req("--family", "one of pillm.plan.FAMILIES"),
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
        (req("--dataset"), req("--setting", "a name from pillm.plan.settings"),
         Arg("--seed", {"type": int, "required": True}),
         js(help="the config's generative section"), req("--images", "gen-images output"),
         req("--classifier", "gen-classifier's classifier.pt"),
         opt("--lr", "gen-lr-pick's lr.json (AdamW settings)"), OUT_DIR),
        ("dataset", "setting", "seed", "params", "images", "classifier", "lr", "device",
         "out_dir"),
        device=True, threads=True,
    ),
    Command(
        "gen-aggregate", "pillm.generative.report:aggregate_generative",
        "stack every generative job into summary parquet and the claim frame",
        (many("--metrics"), many("--curves"), many("--samplers"), many("--classifiers"),
         many("--lr-picks"), many("--lr-curves"), OUT_DIR, req("--claims")),
        ("metrics", "curves", "samplers", "classifiers", "lr_picks", "lr_curves", "out_dir",
         "claims"),
    ),
    Command(
        "gen-tables", "pillm.generative.report:render_gen_tables",
        "generative tables and gen_numbers.tex",
        (SUMMARY, js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "gen-figures", "pillm.generative.figures:gen_figures", "generative figures (pdf + png)",
        (SUMMARY, req("--results-dir", "results/<name>/generative (sample grids)"), OUT_DIR),
        ("summary_dir", "results_dir", "out_dir"),
    ),
    # -- SAFFU
    Command(
        "saffu", "pillm.saffu.run:run_saffu",
        "one SAFFU setting at one train fraction: warm and cold start, every seed",
        (req("--setting", "a key of saffu.settings"),
         Arg("--fraction", {"type": float, "required": True, "help": "train fraction (0, 1]"}),
         req("--tokens-dir"), js(help="pillm.plan.saffu_job_params (JSON)"), OUT_DIR,
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
        "saffu-aggregate", "pillm.saffu.report:aggregate_saffu",
        "stack every SAFFU run into summary parquet and the SAFFU claim frame",
        (many("--metrics"), many("--curves"), req("--kn-metrics"),
         js(help="{settings, main_setting, inits, fractions, seeds, ablation_seeds} (JSON)"),
         OUT_DIR, req("--claims", "summary/claims/saffu.parquet")),
        ("metrics", "curves", "kn_metrics", "params", "out_dir", "claims"),
    ),
    Command(
        "saffu-tables", "pillm.saffu.report:render_saffu_tables",
        "SAFFU tables and saffu_numbers.tex",
        (SUMMARY, opt("--lm-summary", "lm.parquet: the GPT baseline and PIL rows beside SAFFU"),
         js(), TEMPLATES, req("--tables-dir"), NUMBERS),
        ("summary_dir", "lm_summary", "params", "templates", "tables_dir", "numbers"),
    ),
    Command(
        "saffu-figures", "pillm.saffu.figures:saffu_figures", "SAFFU figures (pdf + png)",
        (SUMMARY, req("--main-setting"), OUT_DIR), ("summary_dir", "main_setting", "out_dir"),
    ),
    # -- LoRA
    Command(
        "lora", "pillm.lora.run:lora_job",
        "PIL-LoRA / ridge / LoRA on SST-2 for one base model",
        (req("--model", "pillm-s<seed> or minilm"), req("--method", "pil_lora, ridge or lora"),
         js(help="{lora: ..., data: ...} (JSON)"), *OWN, OUT_DIR),
        ("model", "method", section("lora"), section("data"), "device", "out_dir",
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
    # -- planning
    Command(
        "plan", "pillm.estimate:plan",
        "the jobs a run would do, by rule, its estimated wall time here, and what is missing",
        (Arg("--configfile", {"nargs": "+", "help": "config files (default config/config.yaml)"}),
         Arg("--config", {"nargs": "+", "help": "overrides as for snakemake --config"})),
        ("configfile", "config"), rule=False,
    ),
    # -- paper
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
        "timing_numbers.tex from the newest solve-vs-gradient benchmark record",
        (many("--records", "benchmarks/records/solve_vs_grad_*.json"), TEMPLATES, NUMBERS),
        ("records", "templates", "numbers"),
    ),
    Command(
        "pdf", "pillm.paper.build:build_pdf", "build the paper PDF with latexmk",
        (req("--paper-dir"), req("--build-dir"), req("--out")),
        ("paper_dir", "build_dir", "out"),
        user_errors=("pillm.paper.build:TexMissing",),
    ),
    Command(
        "arxiv", "pillm.paper.build:pack_arxiv", "pack the arXiv tarball from a built paper",
        (req("--build-dir"), req("--out")), ("build_dir", "out"),
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

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}


def command(name: str) -> Command:
    """The table entry of ``name``; a KeyError lists the known commands."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no pillm command {name!r}; known: {sorted(BY_NAME)}") from None


def _resolve(spec: str) -> Any:
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pillm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for c in COMMANDS:
        sp = sub.add_parser(c.name, help=c.help)
        for a in c.args:
            sp.add_argument(a.flag, **a.options)
        if c.device:
            sp.add_argument("--device", default="auto")
        if c.threads:
            sp.add_argument(
                "--threads", type=int, default=0, help="CPU threads for torch (0: default)"
            )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = BY_NAME[args.command]
    if cmd.device:
        from pillm.core.gpu_slots import assign_gpu

        assign_gpu(args.device)  # before anything initialises CUDA: one GPU per job
        # cuBLAS reads this at its first call; deterministic training (core.runtime) needs it
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if cmd.threads and args.threads > 0:
        import torch  # only job commands take --threads: report commands stay torch-free

        torch.set_num_threads(args.threads)
    fn = _resolve(cmd.target)
    values = [getattr(args, v) if isinstance(v, str) else v(args) for v in cmd.passes]
    # A bad config key is the user's to fix, whatever the command: one line naming it, exit 2.
    errors = (_resolve("pillm.plan:ConfigError"), *(_resolve(e) for e in cmd.user_errors))
    try:
        fn(*values)
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
