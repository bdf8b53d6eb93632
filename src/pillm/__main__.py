"""Command line: one subcommand per Snakemake rule (``python -m pillm <command> ...``)."""

from __future__ import annotations

import argparse
import json
import sys


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--params is not valid JSON: {err}") from err


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pillm", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser(
        "prepare-corpus", help="load a corpus (hub or local mirror) into split texts"
    )
    c.add_argument("--corpus", required=True)
    c.add_argument("--params", type=_json, required=True, help="the config's data section (JSON)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("tokenize", help="tokenize split texts into .npy arrays")
    c.add_argument("--corpus-dir", required=True)
    c.add_argument("--params", type=_json, required=True, help="{tokenizer: ..., data: ...} (JSON)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("run-lm", help="build one LM variant/seed (train and/or solve), evaluate it")
    c.add_argument("--variant", required=True)
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--tokens-dir", required=True)
    c.add_argument("--deps", nargs="*", default=[], help="VARIANT=RUN_DIR of runs it builds on")
    c.add_argument("--params", type=_json, required=True, help="{model, train, pil} (JSON)")
    c.add_argument("--device", default="auto")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("lm-extras", help="LAMBADA last-word accuracy and generation samples")
    c.add_argument("--run-dir", required=True)
    c.add_argument("--tokens-dir", required=True)
    c.add_argument("--params", type=_json, required=True, help="{data, lambada, samples} (JSON)")
    c.add_argument("--device", default="auto")

    c = sub.add_parser("probe", help="R²_lin probe of one model's FFN blocks on one corpus")
    c.add_argument("--model", required=True, help="pillm-s<seed>, minilm, smollm2 or a hub name")
    c.add_argument("--corpus", required=True)
    c.add_argument("--corpus-dir", required=True, help="prepare_corpus output (test/valid text)")
    c.add_argument("--params", type=_json, required=True, help="the config's probe section")
    c.add_argument("--checkpoint", help="pillm models: the baseline's model.pt")
    c.add_argument("--tokenizer", help="pillm models: the tokenizer.json it was trained with")
    c.add_argument("--device", default="auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("probe-aggregate", help="stack every probe job into summary parquet")
    c.add_argument("--blocks", nargs="+", required=True)
    c.add_argument("--gradients", nargs="+", required=True)
    c.add_argument("--metrics", nargs="+", required=True)
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("probe-tables", help="probe tables and probe_numbers.tex")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--params", type=_json, required=True)
    c.add_argument("--templates", required=True)
    c.add_argument("--tables-dir", required=True)
    c.add_argument("--numbers", required=True)

    c = sub.add_parser("probe-figures", help="probe figures (pdf + png)")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("gen-images", help="decode an image dataset's splits into one uint8 .npz")
    c.add_argument("--dataset", required=True)
    c.add_argument("--data", type=_json, required=True, help="the config's data section")
    c.add_argument("--out", required=True)

    c = sub.add_parser("gen-classifier", help="train the feature CNN sample quality is scored in")
    c.add_argument("--dataset", required=True)
    c.add_argument("--params", type=_json, required=True, help="the config's generative section")
    c.add_argument("--images", required=True, help="gen-images output")
    c.add_argument("--device", default="auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser(
        "generative", help="fit one generative setting on one dataset, score samples"
    )
    c.add_argument("--dataset", required=True)
    c.add_argument("--setting", required=True, help="a name from pillm.gen_settings.settings")
    c.add_argument("--params", type=_json, required=True, help="the config's generative section")
    c.add_argument("--images", required=True, help="gen-images output")
    c.add_argument("--classifier", required=True, help="gen-classifier's classifier.pt")
    c.add_argument("--device", default="auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("gen-aggregate", help="stack every generative job into summary parquet")
    c.add_argument("--metrics", nargs="+", required=True)
    c.add_argument("--curves", nargs="+", required=True)
    c.add_argument("--samplers", nargs="+", required=True)
    c.add_argument("--classifiers", nargs="+", required=True)
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("gen-tables", help="generative tables and gen_numbers.tex")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--params", type=_json, required=True)
    c.add_argument("--templates", required=True)
    c.add_argument("--tables-dir", required=True)
    c.add_argument("--numbers", required=True)

    c = sub.add_parser("gen-figures", help="generative figures (pdf + png)")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--results-dir", required=True, help="results/<name>/generative (sample grids)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("saffu", help="one SAFFU LM (explicit or random start, then AdamW)")
    c.add_argument("--setting", required=True, help="a key of saffu.settings")
    c.add_argument("--init", required=True, choices=["explicit", "random"])
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--tokens-dir", required=True)
    c.add_argument("--params", type=_json, required=True, help="the config's saffu section")
    c.add_argument("--device", default="auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("saffu-aggregate", help="stack every SAFFU run into summary parquet")
    c.add_argument("--metrics", nargs="+", required=True)
    c.add_argument("--curves", nargs="+", required=True)
    c.add_argument("--params", type=_json, required=True, help="{settings, inits, seeds} (JSON)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("saffu-tables", help="SAFFU tables and saffu_numbers.tex")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--lm-summary", help="lm.parquet: the GPT baseline and PIL rows beside SAFFU")
    c.add_argument("--params", type=_json, required=True)
    c.add_argument("--templates", required=True)
    c.add_argument("--tables-dir", required=True)
    c.add_argument("--numbers", required=True)

    c = sub.add_parser("saffu-figures", help="SAFFU figures (pdf + png)")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--main-setting", required=True)
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("lora", help="PIL-LoRA / ridge / LoRA on SST-2 for one base model")
    c.add_argument("--model", required=True, help="pillm-s<seed> or minilm")
    c.add_argument("--method", required=True, help="pil_lora, ridge or lora")
    c.add_argument("--params", type=_json, required=True, help="{lora: ..., data: ...} (JSON)")
    c.add_argument("--checkpoint", help="pillm models: the baseline's model.pt")
    c.add_argument("--tokenizer", help="pillm models: the tokenizer.json it was trained with")
    c.add_argument("--device", default="auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("lora-aggregate", help="stack every lora job into summary parquet")
    c.add_argument("--metrics", nargs="+", required=True)
    c.add_argument("--curves", nargs="+", required=True)
    c.add_argument("--jobs", nargs="+", required=True, help="expected MODEL/METHOD jobs")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("lora-tables", help="SST-2 table and lora_numbers.tex")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--params", type=_json, required=True)
    c.add_argument("--templates", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--numbers", required=True)

    c = sub.add_parser("lora-figures", help="SST-2 accuracy vs fitting time (pdf + png)")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--pdf", required=True)
    c.add_argument("--png", required=True)

    c = sub.add_parser("aggregate", help="collect run records into summary parquet files")
    c.add_argument("--metrics", nargs="+", required=True)
    c.add_argument("--curves", nargs="+", required=True)
    c.add_argument("--solves", nargs="+", required=True)
    c.add_argument("--samples", nargs="+", required=True)
    c.add_argument("--params", type=_json, required=True, help="{variants, seeds} (JSON)")
    c.add_argument("--out-dir", required=True)

    c = sub.add_parser("tables", help="render LaTeX tables and numbers.tex")
    c.add_argument("--summary-dir", required=True)
    c.add_argument("--tokens-meta", required=True)
    c.add_argument("--params", type=_json, required=True)
    c.add_argument("--templates", required=True)
    c.add_argument("--tables-dir", required=True)
    c.add_argument("--numbers", required=True)

    c = sub.add_parser("figure-curves", help="training-curve figure")
    c.add_argument("--curves", required=True)
    c.add_argument("--pdf", required=True)
    c.add_argument("--png", required=True)

    c = sub.add_parser("figure-lambda", help="λ-sweep figure of the PIL solves")
    c.add_argument("--solves", required=True)
    c.add_argument("--pdf", required=True)
    c.add_argument("--png", required=True)

    c = sub.add_parser("figure-width", help="feature-width figure of the refitted FFNs")
    c.add_argument("--summary", required=True)
    c.add_argument("--pdf", required=True)
    c.add_argument("--png", required=True)

    c = sub.add_parser("pdf", help="build the paper PDF with latexmk")
    c.add_argument("--paper-dir", required=True)
    c.add_argument("--build-dir", required=True)
    c.add_argument("--out", required=True)

    c = sub.add_parser("arxiv", help="pack the arXiv tarball from a built paper")
    c.add_argument("--build-dir", required=True)
    c.add_argument("--out", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "device"):
        from pillm.core.gpu_slots import assign_gpu

        assign_gpu(args.device)  # before anything initialises CUDA: one GPU per job
    if args.command == "prepare-corpus":
        from pillm.data.corpus import prepare_corpus

        d = args.params
        prepare_corpus(
            args.corpus, d["source"], d["local_dir"], d["heldout_fraction"], args.out_dir
        )
    elif args.command == "tokenize":
        from pillm.data.corpus import tokenize_corpus

        t, d = args.params["tokenizer"], args.params["data"]
        tokenize_corpus(
            args.corpus_dir, t["kind"], t["vocab_size"], d["source"], d["local_dir"], args.out_dir
        )
    elif args.command == "run-lm":
        from pillm.lm.run import run_variant

        deps = dict(d.split("=", 1) for d in args.deps)
        run_variant(
            args.variant, args.seed, args.params, args.tokens_dir, deps, args.out_dir, args.device
        )
    elif args.command == "lm-extras":
        from pillm.lm.run import run_extras

        run_extras(args.run_dir, args.tokens_dir, args.params, args.device)
    elif args.command == "probe":
        import torch

        from pillm.probe.run import probe_job

        if args.threads > 0:
            torch.set_num_threads(args.threads)
        probe_job(
            args.model,
            args.corpus,
            args.corpus_dir,
            args.params,
            args.device,
            args.out_dir,
            args.checkpoint,
            args.tokenizer,
        )
    elif args.command == "probe-aggregate":
        from pillm.probe.report import aggregate_probe

        aggregate_probe(args.blocks, args.gradients, args.metrics, args.out_dir)
    elif args.command == "probe-tables":
        from pillm.probe.report import render_probe_tables

        render_probe_tables(
            args.summary_dir, args.params, args.templates, args.tables_dir, args.numbers
        )
    elif args.command == "probe-figures":
        from pillm.probe.figures import probe_figures

        probe_figures(args.summary_dir, args.out_dir)
    elif args.command in ("gen-classifier", "generative"):
        import torch

        from pillm.generative.run import classifier_job, generative_job

        if args.threads > 0:
            torch.set_num_threads(args.threads)
        if args.command == "gen-classifier":
            classifier_job(args.dataset, args.params, args.images, args.device, args.out_dir)
        else:
            generative_job(
                args.dataset, args.setting, args.params, args.images, args.classifier,
                args.device, args.out_dir,
            )  # fmt: skip
    elif args.command == "gen-images":
        from pillm.generative.run import prepare_images

        prepare_images(args.dataset, args.data, args.out)
    elif args.command == "gen-aggregate":
        from pillm.generative.report import aggregate_generative

        aggregate_generative(
            args.metrics, args.curves, args.samplers, args.classifiers, args.out_dir
        )
    elif args.command == "gen-tables":
        from pillm.generative.report import render_gen_tables

        render_gen_tables(
            args.summary_dir, args.params, args.templates, args.tables_dir, args.numbers
        )
    elif args.command == "gen-figures":
        from pillm.generative.report import gen_figures

        gen_figures(args.summary_dir, args.results_dir, args.out_dir)
    elif args.command == "saffu":
        import torch

        from pillm.saffu.run import run_saffu

        if args.threads > 0:
            torch.set_num_threads(args.threads)
        run_saffu(
            args.setting,
            args.init,
            args.seed,
            args.params,
            args.tokens_dir,
            args.out_dir,
            args.device,
        )
    elif args.command == "saffu-aggregate":
        from pillm.saffu.report import aggregate_saffu

        aggregate_saffu(args.metrics, args.curves, args.params, args.out_dir)
    elif args.command == "saffu-tables":
        from pillm.saffu.report import render_saffu_tables

        render_saffu_tables(
            args.summary_dir,
            args.lm_summary,
            args.params,
            args.templates,
            args.tables_dir,
            args.numbers,
        )
    elif args.command == "saffu-figures":
        from pillm.saffu.report import saffu_figures

        saffu_figures(args.summary_dir, args.main_setting, args.out_dir)
    elif args.command == "lora":
        import torch

        from pillm.lora.run import lora_job

        if args.threads > 0:
            torch.set_num_threads(args.threads)
        p = args.params
        lora_job(
            args.model, args.method, p["lora"], p["data"], args.device, args.out_dir,
            args.checkpoint, args.tokenizer,
        )  # fmt: skip
    elif args.command == "lora-aggregate":
        from pillm.lora.report import aggregate_lora

        aggregate_lora(args.metrics, args.curves, args.jobs, args.out_dir)
    elif args.command == "lora-tables":
        from pillm.lora.report import render_lora_tables

        render_lora_tables(args.summary_dir, args.params, args.templates, args.table, args.numbers)
    elif args.command == "lora-figures":
        from pillm.lora.report import lora_figure

        lora_figure(args.summary_dir, args.pdf, args.png)
    elif args.command == "aggregate":
        from pillm.lm.report import aggregate

        aggregate(
            args.metrics,
            args.curves,
            args.solves,
            args.samples,
            args.params["variants"],
            args.params["seeds"],
            args.out_dir,
        )
    elif args.command == "tables":
        from pillm.lm.report import render_tables

        render_tables(
            args.summary_dir,
            args.tokens_meta,
            args.params,
            args.templates,
            args.tables_dir,
            args.numbers,
        )
    elif args.command == "figure-curves":
        from pillm.lm.figures import training_curves

        training_curves(args.curves, args.pdf, args.png)
    elif args.command == "figure-lambda":
        from pillm.lm.figures import lambda_sweep

        lambda_sweep(args.solves, args.pdf, args.png)
    elif args.command == "figure-width":
        from pillm.lm.figures import feature_width

        feature_width(args.summary, args.pdf, args.png)
    elif args.command == "pdf":
        from pillm.paper.build import TexMissing, build_pdf

        try:
            build_pdf(args.paper_dir, args.build_dir, args.out)
        except TexMissing as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    elif args.command == "arxiv":
        from pillm.paper.build import pack_arxiv

        pack_arxiv(args.build_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
