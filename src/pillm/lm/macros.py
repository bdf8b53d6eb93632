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
    FEATURE_VARIANTS,
    TARGET_VARIANTS,
    WIDTH_SWEEP,
    LMReport,
    fmt_p,
    metric_table,
    per_seed,
    percent,
)
from pillm.lm.feature_maps import feature_numbers, width_tex
from pillm.lm.variants import VARIANTS
from pillm.paper.latex import MISSING, count_of, fmt_num, fmt_pm, macro_name, tex_escape


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
        # how data-starved the study is: train-split tokens per parameter of the baseline
        "TokensPerParam": fmt_num(tokens_meta["tokens"]["train"] / b["params_total"]["mean"], 3),
        "TokensPerNonEmbParam": fmt_num(
            tokens_meta["tokens"]["train"] / b["params_non_embedding"]["mean"], 3
        ),
        "TrainedMargin": fmt_num(params["trained_margin"], 2),
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
        "SeedCount": count_of(b["test_ppl"]["n"], "seed"),
        # counts the prose would otherwise type: from what this build ran
        "VariantCount": str(summary["variant"].n_unique()),
        "RefitWidthCount": str(len(set(WIDTH_SWEEP) & set(summary["variant"].to_list()))),
        "TargetCount": str(len(set(TARGET_VARIANTS) & set(summary["variant"].to_list()))),
        "RefitWidthSweep": width_sweep_sentence(params["variants"]),
        # the FFN's width (model.ffn_mult) and each refit's feature map, in units of d
        **feature_numbers(model["ffn_mult"], summary["variant"].unique().to_list()),
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


def width_sweep_sentence(variants: list[str]) -> str:
    """The method's sentence on the refit width sweep: the single-projection widths the config's
    ``variants`` run besides the feature maps the section names (``FEATURE_VARIANTS``)."""
    main = set(FEATURE_VARIANTS)
    mults = sorted(WIDTH_SWEEP[v] for v in set(variants) & set(WIDTH_SWEEP) if v not in main)
    if not mults:
        return "This configuration runs no width sweep beyond these maps."
    words = [f"${width_tex(m)}$" for m in mults]
    listed = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return f"A width sweep adds single projections of width {listed}."


def gpu_determinism(enabled: bool) -> str:
    """The appendix's sentence on GPU reruns, for this build's ``train.deterministic``."""
    varying = ("atomics in backward passes add in a varying order, so a rerun can give a "
               "slightly different model and claims whose intervals lie near zero can change "
               "verdict between builds")  # fmt: skip
    # Not this setting's: SAFFU's gradient is always summed in a fixed order (saffu.segment_sum).
    saffu = ("SAFFU's sparse weight gradient is summed in a fixed order on a GPU either way "
             "(a test reruns it and requires the same bits).")  # fmt: skip
    key = "\\texttt{train.\\allowbreak{}deterministic}"  # breakable: a long word in a narrow line
    if not enabled:
        return ("Gradient training on a GPU runs PyTorch's default kernels "
                f"({key} is off): {varying}. {saffu}")  # fmt: skip
    return ("Gradient training on a GPU runs PyTorch's deterministic kernels "
            f"({key}): strictly for the language models, where flash "
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


def kneser_ney_numbers(rep: LMReport) -> dict[str, str]:
    """The Kneser-Ney n-gram row (SAFFU study, same train split and test tokens): its order,
    test PPL and BPB, and against the baseline the PPL ratio PPL_base/PPL_KN and loss share in
    percent (``LMReport.kn_figures``); '--' in a build without it."""
    kn = rep.kn_figures()
    keys = {"order": "Order", "ppl": "PPL", "bpb": "BPB", "ratio": "Ratio", "share": "Share"}
    return {f"KneserNey{name}": kn.get(key, MISSING) for key, name in keys.items()}


def lambada_numbers(rep: LMReport) -> dict[str, str]:
    """LAMBADA's passages (``LambadaCount``), the percent of them whose target holds a token that
    never occurs in the train split (``LambadaOovShare``) and how many remain
    (``LambadaSeenCount``): properties of the data, the same in every run."""
    out = dict.fromkeys(("LambadaCount", "LambadaOovShare", "LambadaSeenCount"), MISSING)
    for v in rep.variants:
        m = rep.m.get(v, {})
        if "lambada_oov_share" in m:
            out["LambadaCount"] = fmt_num(m["lambada_n"]["mean"], 0)
            out["LambadaOovShare"] = fmt_num(100 * m["lambada_oov_share"]["mean"], 1)
            out["LambadaSeenCount"] = fmt_num(m["lambada_n_seen"]["mean"], 0)
            break
    return out


def trained_numbers(rep: LMReport) -> dict[str, str]:
    """Over every gradient-trained run of the build's variants (``trained`` records, written by
    ``pillm.lm.aggregate``): how many (``GradientRuns``), how many did not train
    (``UntrainedRuns``) and the smallest training-loss drop in nats (``MinTrainLossDrop``)."""
    flags = per_seed(rep.runs, "trained")
    drops = per_seed(rep.runs, "train_loss_drop")
    values = [x for v in rep.variants for x in flags.get(v, {}).values()]
    fell = [x for v in rep.variants for x in drops.get(v, {}).values()]
    return {
        "GradientRuns": str(len(values)),
        "UntrainedRuns": str(sum(1 for x in values if x != 1)),
        "MinTrainLossDrop": fmt_num(min(fell), 2) if fell else MISSING,
    }


def lm_numbers(rep: LMReport) -> dict[str, str]:
    """Macros for every variant (PPL, accuracy, LAMBADA, times) and the headline comparisons."""
    out: dict[str, str] = {}
    for v in rep.variants:
        name = variant_macro(v)
        out[f"PPL{name}"] = rep.pm(v, "test_ppl", 1)
        out[f"Acc{name}"] = rep.pm(v, "test_acc", 1, 100)
        out[f"Lambada{name}"] = rep.pm(v, "lambada_acc", 1, 100)
        out[f"LambadaSeen{name}"] = rep.pm(v, "lambada_acc_seen", 1, 100)
        out[f"Solve{name}"] = rep.pm(v, "solve_time_s", 2)
        out[f"Grad{name}"] = rep.pm(v, "grad_time_s", 1)
    # Every registered variant has its macros, `--' where this build did not run it: the prose
    # quotes variants a config may leave out (the refit width sweep) and must still compile.
    for v in (v for v in VARIANTS if v not in rep.variants):
        name = variant_macro(v)
        out |= {f"{k}{name}": MISSING for k in ("PPL", "Acc", "Lambada", "LambadaSeen", "Solve",
                                                 "Grad")}  # fmt: skip
    out["UnigramPPL"] = fmt_num(math.exp(rep.unigram), 1)
    out |= grid_edge_numbers(rep)
    out |= kneser_ney_numbers(rep)
    out |= lambada_numbers(rep)
    out |= trained_numbers(rep)
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
