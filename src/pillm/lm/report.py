"""The LM study's tables and ``numbers.tex`` (the ``tables`` command): ``LM_TABLES`` rendered
through Jinja2 from the summaries of ``pillm.lm.aggregate``, with the macros of
``pillm.lm.macros``.

Rows and numbers are formatted in Python (``pillm.lm.comparisons``), never in the template;
a table with no rows shows nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from pillm.lm.comparisons import LMReport
from pillm.lm.feature_maps import shape, width_tex
from pillm.lm.labels import LABELS
from pillm.lm.macros import describe_policy, lm_numbers, numbers
from pillm.lm.solve_table import solve_tables
from pillm.paper.latex import MISSING, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table

LM_TABLES = {  # name -> (label, column spec, header)
    "lm_samples": ("tab:samples", "lp{0.62\\linewidth}", ["Model", "Continuation (first seed)"]),
    "lm_main": (
        "tab:main",
        "lrrrrrrrrrr",
        [
            "Model",
            "Trainable (M)",
            "Solved (M)",
            "Grad. (s)",
            "Solve (s)",
            "PPL $\\downarrow$",
            "Acc (\\%) $\\uparrow$",
            "BPB $\\downarrow$",
            "LAMBADA (\\%)",
            "Seen (\\%)",
            "$n$",
        ],
    ),
    "lm_contribution": (
        "tab:contribution",
        "lrrr",
        [
            "Model",
            "PPL",
            "$\\mathrm{PPL}_{\\mathrm{full}}/\\mathrm{PPL}$ (\\%)",
            "Loss share (\\%)",
        ],
    ),
    "lm_features": (
        "tab:features",
        "lrrrrr",
        [
            "PIL features",
            "Solved (M)",
            "PPL",
            "$\\Delta$PPL vs.\\ baseline",
            "Solve (s)",
            "$\\kappa_{\\max}$",
        ],
    ),
    "lm_strategies": ("tab:strategies", "lrrr", ["Strategy", "PPL", "Acc (\\%)", "Total time (s)"]),
    "lm_targets": (
        "tab:targets",
        "llrrr",
        [
            "PIL target",
            "Reference",
            "PPL",
            "$\\Delta\\mathcal{L}$ vs.\\ ref.\\ (nats)",
            "$p$ (paired $t$)",
        ],
    ),
}


def seeds_phrase(n_seeds: int) -> str:
    """How a table's "a ± b" reads: the 95 % t interval over seeds, or the mean of one seed."""
    if n_seeds == 1:
        return "one seed (no interval: the mean alone)"
    return f"mean $\\pm$ half-width of the 95\\,\\% $t$ interval over {n_seeds} seeds"


def lm_captions(
    tokenizer: str,
    policy: str,
    n_seeds: int,
    train_tokens: str,
    lambada: tuple[str, str],
    kn: bool,
) -> dict[str, str]:
    """Every LM table's caption; ``train_tokens`` and ``lambada`` (the percent of LAMBADA
    passages whose target holds a token absent from the train split, and how many passages
    remain) formatted; ``kn``: the main table has the Kneser-Ney row."""
    seeds = seeds_phrase(n_seeds)
    bi_m, bi_w = shape("refit")  # Bi-PIL: projections, width of each in units of d
    oov_share, seen_count = lambada
    oov = (f"; {oov_share}\\,\\% of its passages have a target token that never occurs in the "
           "train split (no model here saw it as a target)"
           if oov_share != MISSING else "")  # fmt: skip
    seen = (f"Seen: the same on the {seen_count} passages whose target tokens all occur in the "
            "train split. ")  # fmt: skip
    kn_row = (" Last row: an interpolated Kneser-Ney $n$-gram model counted on the same train "
              "split (the SAFFU study's baseline; deterministic, no accuracy)."
              if kn else "")  # fmt: skip
    return {
        "lm_main": f"All LM variants on WikiText-2 ({tokenizer}; {policy}; {train_tokens} "
        f"training tokens); {seeds}. Trainable: parameters updated by gradient (including the run "
        "a variant starts from); Solved: nonzero entries of the output maps set by ridge "
        "regression (a map solved for a zero target is exactly zero). Grad./Solve: wall time of "
        f"the gradient phases and of the closed-form solves. LAMBADA: last-word accuracy{oov}. "
        f"{seen}$n$: runs present / expected. "
        "Controls: a frozen random-init FFN with attention trained, the PIL features of "
        "PIL$\\to$Attn with random output maps of the solved maps' norms, attention-only with its "
        "depth set so its parameter count is closest to the baseline's, and an FFN without "
        f"activation.{kn_row}",
        "lm_contribution": "Contribution analysis. The seed outline's measure is the perplexity "
        "ratio; the loss share is $(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L})/"
        "(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L}_{\\mathrm{full}})$ with an add-one unigram model "
        f"of the train split as the floor; both per seed, {seeds}.",
        "lm_features": "Single vs.\\ Bi-PIL features, fitted to the trained baseline FFNs "
        f"(``refit''). Two independent Gaussian projections of width ${width_tex(bi_w)}$ are "
        f"distributed like one of width ${width_tex(bi_m * bi_w)}$; the last row is that control. "
        f"$\\Delta$PPL paired by seed; {seeds}.",
        "lm_strategies": f"PIL training strategies (seed Table 4); {seeds}. Total time includes "
        "the gradient training of the model a strategy starts from.",
        "lm_samples": "Generation samples: top-$k$ ($k=40$, temperature 0.8) continuations of the "
        "first configured prompt by each variant's first-seed model, decoded as is (characters "
        "outside printable ASCII shown as ?).",
        "lm_targets": "PIL targets against the model they start from, paired by seed. "
        "$\\Delta\\mathcal{L}<0$ means the solved FFNs lower the test loss; $p$: two-sided paired "
        f"$t$-test over seeds ('--' with fewer than two seeds); {seeds}.",
    }


def sample_rows(
    samples: pl.DataFrame, variants: list[str], max_chars: int = 160
) -> list[list[str]]:
    """One continuation per variant: first seed, first prompt, escaped and cut to a line or two."""
    first = samples.sort("seed").group_by("variant", maintain_order=True).first()
    text = dict(zip(first["variant"], first["continuation"], strict=True))
    prompt = first["prompt"][0] if first.height else ""
    rows = []
    for v in variants:
        cont = " ".join(text.get(v, "").split())[:max_chars]
        # Byte-level BPE can decode partial UTF-8 (U+FFFD); pdflatex cannot set arbitrary Unicode.
        cont = "".join(c if 32 <= ord(c) < 127 else "?" for c in cont)
        rows.append([LABELS[v], f"\\textit{{{tex_escape(prompt)}}} {tex_escape(cont)}"])
    return rows


def render_tables(
    summary_dir: str,
    tokens_meta_path: str,
    params: dict,
    template_dir: str,
    tables_dir: str,
    numbers_path: str,
) -> None:
    """Write the LM tables (``LM_TABLES``) into ``tables_dir`` and the LM macros to
    ``numbers_path``, through the report contract."""
    summary_dir = Path(summary_dir)
    summary = pl.read_parquet(summary_dir / "lm.parquet")
    runs = pl.read_parquet(summary_dir / "runs.parquet")
    samples = pl.read_parquet(summary_dir / "samples.parquet")
    solves = pl.read_parquet(summary_dir / "solves.parquet")
    tokens_meta = json.loads(Path(tokens_meta_path).read_text())
    rep = LMReport(summary, runs, params["variants"], tokens_meta["unigram_test_loss"])
    kn_path = summary_dir / "kneser_ney.parquet"  # the SAFFU study's n-gram row, if built
    if kn_path.is_file():
        rep.kn = {r["metric"]: r for r in pl.read_parquet(kn_path).iter_rows(named=True)}
    n_seeds = len(params["seeds"])
    macros = {**numbers(summary, runs, tokens_meta, params), **lm_numbers(rep)}
    captions = lm_captions(
        tex_escape(tokens_meta["tokenizer"]),
        tex_escape(describe_policy(tokens_meta["policy"])),
        n_seeds,
        macros["TrainTokens"],
        (macros["LambadaOovShare"], macros["LambadaSeenCount"]),
        bool(rep.kn_figures()),
    )
    rows = {
        "lm_main": rep.main_rows(),
        "lm_contribution": rep.contribution_rows(),
        "lm_features": rep.feature_rows(),
        "lm_strategies": rep.strategy_rows(),
        "lm_targets": rep.target_rows(),
        "lm_samples": sample_rows(samples, params["variants"]),
    }
    tables = {
        Path(tables_dir) / f"{name}.tex": lm_table(
            captions[name], label, colspec, header, rows[name]
        )
        for name, (label, colspec, header) in LM_TABLES.items()
    }
    tables[Path(tables_dir) / "lm_solves.tex"] = solve_tables(
        solves, params["variants"], seeds_phrase(n_seeds)
    )
    render_report(
        tables, macros, template_dir, numbers_path, "pillm.lm.report from results/<name>/summary"
    )


def lm_table(
    caption: str, label: str, colspec: str, header: list[str], rows: list[list[str] | str]
) -> Table:
    """An LM table: top of the page, small type, nothing shown where a table has no rows."""
    return Table(caption, label, colspec, header, rows, "t", "small", "4pt", empty=None)
