"""The LM study's macros for ``numbers.tex``: the build's configuration and data, the baseline's
figures, every variant's perplexity, accuracy and times, and the headline comparisons.

Numbers are formatted here (``pillm.paper.latex``), never in a template. Every "a ± b" is the
mean over seeds ± the half-width of its 95 % t interval (``pillm.lm.comparisons``); macros named
``...Std`` keep the sample standard deviation.
"""

from __future__ import annotations

import math

import polars as pl

from pillm.lm.comparisons import (
    TARGET_VARIANTS,
    WIDTH_SWEEP,
    LMReport,
    fmt_p,
    metric_table,
    per_seed,
    percent,
)
from pillm.paper.latex import MISSING, fmt_num, fmt_pm, macro_name, tex_escape


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
        # counts the prose would otherwise type: from what this build ran
        "VariantCount": str(summary["variant"].n_unique()),
        "RefitWidthCount": str(len(set(WIDTH_SWEEP) & set(summary["variant"].to_list()))),
        "TargetCount": str(len(set(TARGET_VARIANTS) & set(summary["variant"].to_list()))),
        "BaselinePPLPM": fmt_pm(b["test_ppl"]["mean"], b["test_ppl"]["ci95"], 1),
        "BaselineAccPM": fmt_pm(
            100 * b["test_acc"]["mean"], _scale(b["test_acc"]["ci95"], 100), 1
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
        "GpuDeterminism": gpu_determinism(train.get("deterministic", True)),
    }


def gpu_determinism(enabled: bool) -> str:
    """The appendix's sentence on GPU reruns, for this build's ``train.deterministic``."""
    varying = ("atomics in backward passes add in a varying order, so a rerun can give a "
               "slightly different model and claims whose intervals lie near zero can change "
               "verdict between builds")  # fmt: skip
    # Not this setting's: SAFFU's gradient is always summed in a fixed order (saffu.segment_sum).
    saffu = ("SAFFU's sparse weight gradient is summed in a fixed order on a GPU either way "
             "(a test reruns it and requires the same bits).")  # fmt: skip
    if not enabled:
        return ("Gradient training on a GPU runs PyTorch's default kernels "
                f"(\\texttt{{train.deterministic}} is off): {varying}. {saffu}")  # fmt: skip
    return ("Gradient training on a GPU runs PyTorch's deterministic kernels "
            "(\\texttt{train.deterministic}): strictly for the language models, where flash "
            "attention's deterministic backward replaces cuDNN's and the token embedding's "
            "gradient is summed in exact 64-bit fixed point, and where PyTorch has them for the "
            "sample-quality classifiers. A test trains one language-model run twice on a GPU and "
            f"requires identical weights. Without these kernels {varying}. {saffu}")  # fmt: skip


def describe_policy(policy: str) -> str:
    """Human wording of a data policy string written by ``data.load_corpus``."""
    source, rest = policy.split(":", 1)
    where = "offline mirror" if source == "local" else "Hugging Face hub"
    return f"{where}; {rest.split(':', 1)[1]}"


def variant_macro(variant: str) -> str:
    """refit_single16d -> RefitSingleSixteenD (whole numbers spelled out)."""
    return macro_name(variant, whole_numbers=True)


def grid_edge_numbers(rep: LMReport) -> dict[str, str]:
    """Counts over every run (variants x seeds) of λ and step selections: all of them, those
    whose first pick lay on a grid edge, the points added, and those still on an edge after the
    bounded extension (``\\PilEdgeSelections`` of ``\\PilSelections``; lm/pil.py)."""
    totals = {}
    for metric, macro in (
        ("pil_selections", "PilSelections"),
        ("pil_edge_hits", "PilEdgeHits"),
        ("pil_grid_extensions", "PilGridExtensions"),
        ("pil_edge_selections", "PilEdgeSelections"),
    ):
        values = per_seed(rep.runs, metric)
        totals[macro] = str(round(sum(sum(values.get(v, {}).values()) for v in rep.variants)))
    return totals


def lm_numbers(rep: LMReport) -> dict[str, str]:
    """Macros for every variant (PPL, accuracy, LAMBADA, times) and the headline comparisons."""
    out: dict[str, str] = {}
    for v in rep.variants:
        name = variant_macro(v)
        out[f"PPL{name}"] = rep.pm(v, "test_ppl", 1)
        out[f"Acc{name}"] = rep.pm(v, "test_acc", 1, 100)
        out[f"Lambada{name}"] = rep.pm(v, "lambada_acc", 1, 100)
        out[f"Solve{name}"] = rep.pm(v, "solve_time_s", 2)
        out[f"Grad{name}"] = rep.pm(v, "grad_time_s", 1)
    out["UnigramPPL"] = fmt_num(math.exp(rep.unigram), 1)
    out |= grid_edge_numbers(rep)
    for name in ("ParamsAttnOnlyMatched", "LayersAttnOnlyMatched", "ParamsGapAttnOnlyMatched"):
        out[name] = MISSING  # defined in every build; set below when both runs exist
    if rep.has("baseline", "attn_only_matched"):
        base, matched = (
            rep.mean("baseline", "params_total"),
            rep.mean("attn_only_matched", "params_total"),
        )
        out["ParamsAttnOnlyMatched"] = fmt_num(matched / 1e6, 2)
        out["LayersAttnOnlyMatched"] = fmt_num(rep.mean("attn_only_matched", "model_layers"), 0)
        out["ParamsGapAttnOnlyMatched"] = fmt_num(100 * (matched - base) / base, 1)
    if rep.has("baseline", "attn_only"):
        r, rs = rep.ratio("attn_only")
        s, ss = rep.share("attn_only")
        out["RatioAttnOnly"] = fmt_pm(100 * r, percent(rs), 1)
        out["ShareAttnOnly"] = fmt_pm(100 * s, percent(ss), 1)
    if rep.has("baseline", "ffn_only"):
        s, ss = rep.share("ffn_only")
        out["ShareFfnOnly"] = fmt_pm(100 * s, percent(ss), 1)
    for v in TARGET_VARIANTS:
        if rep.has(v, "attn_only"):
            d, s, p = rep.target_comparison(v, "attn_only")
            out[f"DeltaLoss{variant_macro(v)}"] = fmt_pm(d, s, 4)
            out[f"PValue{variant_macro(v)}"] = fmt_p(p)
    return out
