"""LaTeX tables and ``numbers.tex`` rendered from the summaries with Jinja2.

Templates use LaTeX-safe delimiters (``\\VAR{}``, ``\\BLOCK{}``, ``\\#{}``) and ``StrictUndefined``
so a typo fails instead of printing nothing. Numbers are formatted here, in Python, never in the
template or the manuscript.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from .records import write_text

_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text: Any) -> str:
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _TEX_ESCAPES[m.group()], str(text))


def make_env(template_dir: str | Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        block_start_string=r"\BLOCK{",
        block_end_string="}",
        variable_start_string=r"\VAR{",
        variable_end_string="}",
        comment_start_string=r"\#{",
        comment_end_string="}",
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["tex"] = tex_escape
    return env


def fmt_num(x: float | None, digits: int = 1) -> str:
    """Fixed digits with a LaTeX thousands separator; '--' for missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "--"
    text = f"{x:,.{digits}f}".replace(",", "{,}")
    if text.startswith("-") and not text.strip("-0.{,}"):  # rounds to zero: no sign ("-0.00")
        text = text[1:]
    return "$-$" + text[1:] if text.startswith("-") else text  # a minus sign, not a hyphen


def fmt_pm(mean: float, std: float | None, digits: int = 1) -> str:
    """'mean ± std' in math mode; std omitted when there is one seed (it is undefined)."""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return fmt_num(mean, digits)
    return f"{fmt_num(mean, digits)} $\\pm$ {fmt_num(std, digits)}"


def metric_table(summary: pl.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """{variant: {metric: {mean, std, n, n_expected}}} from the lm summary."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in summary.iter_rows(named=True):
        out.setdefault(row["variant"], {})[row["metric"]] = row
    return out


def _scale(x: float | None, k: float) -> float | None:
    return None if x is None else x * k


def numbers(
    summary: pl.DataFrame, runs: pl.DataFrame, tokens_meta: dict, params: dict
) -> dict[str, str]:
    """Macro name -> formatted value for numbers.tex."""
    b = metric_table(summary)["baseline"]
    model, train = params["model"], params["train"]
    devices = sorted(set(runs["device_name"].to_list()))
    return {
        "ConfigName": tex_escape(params["name"]),
        "DataPolicy": tex_escape(describe_policy(tokens_meta["policy"])),
        "TokenizerName": tex_escape(tokens_meta["tokenizer"]),
        "VocabSize": fmt_num(tokens_meta["vocab_size"], 0),
        "TrainTokens": fmt_num(tokens_meta["tokens"]["train"], 0),
        "ValidTokens": fmt_num(tokens_meta["tokens"]["valid"], 0),
        "TestTokens": fmt_num(tokens_meta["tokens"]["test"], 0),
        "ModelLayers": str(model["n_layer"]),
        "ModelDim": str(model["d_model"]),
        "ModelHeads": str(model["n_head"]),
        "ContextLen": str(model["context"]),
        "Epochs": str(train["epochs"]),
        "BatchSize": str(train["batch_size"]),
        "LearningRate": f"{train['lr']:g}",
        "NumSeeds": str(b["test_ppl"]["n"]),
        "SeedCount": f"{b['test_ppl']['n']} seed" + ("s" if b["test_ppl"]["n"] != 1 else ""),
        "BaselinePPLPM": fmt_pm(b["test_ppl"]["mean"], b["test_ppl"]["std"], 1),
        "BaselineAccPM": fmt_pm(
            100 * b["test_acc"]["mean"], _scale(b["test_acc"]["std"], 100), 1
        ).replace(" $\\pm$", "\\% $\\pm$")
        + "\\%",
        "BaselinePPL": fmt_num(b["test_ppl"]["mean"], 1),
        "BaselinePPLStd": fmt_num(b["test_ppl"]["std"], 1),
        "BaselineAcc": fmt_num(100 * b["test_acc"]["mean"], 1),
        "BaselineAccStd": fmt_num(_scale(b["test_acc"]["std"], 100), 1),
        "BaselineBPB": fmt_num(b["test_bpb"]["mean"], 3),
        "BaselineParams": fmt_num(b["params_total"]["mean"] / 1e6, 2),
        "BaselineNonEmbParams": fmt_num(b["params_non_embedding"]["mean"] / 1e6, 2),
        "BaselineTrainTime": fmt_num(b["train_time_s"]["mean"], 1),
        "BaselineTokensPerSec": fmt_num(b["tokens_per_s"]["mean"], 0),
        "Device": tex_escape(" / ".join(devices)),
    }


def describe_policy(policy: str) -> str:
    """Human wording of a data policy string written by ``data.load_corpus``."""
    source, rest = policy.split(":", 1)
    where = "offline mirror" if source == "local" else "Hugging Face hub"
    return f"{where}; {rest.split(':', 1)[1]}"


LM_TABLES = {  # name -> (label, column spec, header)
    "lm_samples": ("tab:samples", "lp{0.62\\linewidth}", ["Model", "Continuation (first seed)"]),
    "lm_main": (
        "tab:main",
        "lrrrrrrrrr",
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


def lm_captions(tokenizer: str, policy: str, n_seeds: int) -> dict[str, str]:
    seeds = f"mean $\\pm$ sample std over {n_seeds} seed{'s' if n_seeds != 1 else ''}"
    return {
        "lm_main": f"All LM variants on WikiText-2 ({tokenizer}; {policy}); {seeds}. Trainable: "
        "parameters updated by gradient (including the run a variant starts from); Solved: output "
        "weights set by ridge regression. Grad./Solve: wall time of the gradient phases and of the "
        "closed-form solves. LAMBADA: last-word accuracy. $n$: runs present / expected.",
        "lm_contribution": "Contribution analysis. The seed outline's measure is the perplexity "
        "ratio; the loss share is $(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L})/"
        "(\\mathcal{L}_{\\mathrm{uni}} - \\mathcal{L}_{\\mathrm{full}})$ with an add-one unigram model "
        f"of the train split as the floor; both per seed, {seeds}.",
        "lm_features": "Single vs.\\ Bi-PIL features, fitted to the trained baseline FFNs "
        "(``refit''). Two independent Gaussian projections of width $4d$ are distributed like one "
        f"of width $8d$; the last row is that control. $\\Delta$PPL paired by seed; {seeds}.",
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
    from .variants import VARIANTS

    first = samples.sort("seed").group_by("variant", maintain_order=True).first()
    text = dict(zip(first["variant"], first["continuation"], strict=True))
    prompt = first["prompt"][0] if first.height else ""
    rows = []
    for v in variants:
        cont = " ".join(text.get(v, "").split())[:max_chars]
        # Byte-level BPE can decode partial UTF-8 (U+FFFD); pdflatex cannot set arbitrary Unicode.
        cont = "".join(c if 32 <= ord(c) < 127 else "?" for c in cont)
        rows.append([VARIANTS[v].label, f"\\textit{{{tex_escape(prompt)}}} {tex_escape(cont)}"])
    return rows


def render_tables(
    summary_dir: str,
    tokens_meta_path: str,
    params: dict,
    template_dir: str,
    tables_dir: str,
    numbers_path: str,
) -> None:
    from .lm_report import LMReport, lm_numbers

    summary_dir = Path(summary_dir)
    summary = pl.read_parquet(summary_dir / "lm.parquet")
    runs = pl.read_parquet(summary_dir / "runs.parquet")
    samples = pl.read_parquet(summary_dir / "samples.parquet")
    tokens_meta = json.loads(Path(tokens_meta_path).read_text())
    env = make_env(template_dir)
    rep = LMReport(summary, runs, params["variants"], tokens_meta["unigram_test_loss"])
    n_seeds = len(params["seeds"])
    captions = lm_captions(
        tex_escape(tokens_meta["tokenizer"]),
        tex_escape(describe_policy(tokens_meta["policy"])),
        n_seeds,
    )
    rows = {
        "lm_main": rep.main_rows(),
        "lm_contribution": rep.contribution_rows(),
        "lm_features": rep.feature_rows(),
        "lm_strategies": rep.strategy_rows(),
        "lm_targets": rep.target_rows(),
        "lm_samples": sample_rows(samples, params["variants"]),
    }
    template = env.get_template("table.tex.j2")
    for name, (label, colspec, header) in LM_TABLES.items():
        tex = template.render(
            caption=captions[name], label=label, colspec=colspec, header=header, rows=rows[name]
        )
        write_text(Path(tables_dir) / f"{name}.tex", tex)
    macros = {**numbers(summary, runs, tokens_meta, params), **lm_numbers(rep)}
    write_text(numbers_path, env.get_template("numbers.tex.j2").render(macros=macros))
