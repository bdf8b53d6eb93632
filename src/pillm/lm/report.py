"""The LM study's report: aggregation of the runs, tables and ``numbers.tex``.

Outputs of ``aggregate`` (``results/<name>/summary``): ``runs.parquet`` (every metric row of every
run), ``lm.parquet`` (mean/std/ci95/n over seeds per variant and metric), ``curves``, ``solves`` and
``samples``. Tables render through Jinja2 with numbers formatted here, never in the template.
Every "a ± b" of the LM tables and macros is the mean over seeds ± the half-width of its 95 %
t interval (``pillm.paper.tidy.ci95``); with one seed there is no interval and the mean stands
alone. Macros named ``...Std`` keep the sample standard deviation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
from scipy import stats

from pillm.lm.variants import VARIANTS
from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, macro_name, mean_std, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import ci95, loss_share, read_runs, stack_parquet, summarise, write_parquet


def metric_table(summary: pl.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """{variant: {metric: {mean, std, ci95, n, n_expected}}} from the lm summary."""
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


def seeds_phrase(n_seeds: int) -> str:
    """How a table's "a ± b" reads: the 95 % t interval over seeds, or the mean of one seed."""
    if n_seeds == 1:
        return "one seed (no interval: the mean alone)"
    return f"mean $\\pm$ half-width of the 95\\,\\% $t$ interval over {n_seeds} seeds"


def lm_captions(tokenizer: str, policy: str, n_seeds: int) -> dict[str, str]:
    seeds = seeds_phrase(n_seeds)
    return {
        "lm_main": f"All LM variants on WikiText-2 ({tokenizer}; {policy}); {seeds}. Trainable: "
        "parameters updated by gradient (including the run a variant starts from); Solved: output "
        "weights set by ridge regression. Grad./Solve: wall time of the gradient phases and of the "
        "closed-form solves. LAMBADA: last-word accuracy. $n$: runs present / expected. "
        "Controls: a frozen random-init FFN with attention trained, attention-only with its depth "
        "set so its parameter count is closest to the baseline's, and an FFN without activation.",
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
    """Write the LM tables (``LM_TABLES``) into ``tables_dir`` and the LM macros to
    ``numbers_path``, through the report contract."""
    summary_dir = Path(summary_dir)
    summary = pl.read_parquet(summary_dir / "lm.parquet")
    runs = pl.read_parquet(summary_dir / "runs.parquet")
    samples = pl.read_parquet(summary_dir / "samples.parquet")
    tokens_meta = json.loads(Path(tokens_meta_path).read_text())
    rep = LMReport(summary, runs, params["variants"], tokens_meta["unigram_test_loss"])
    kn_path = summary_dir / "kneser_ney.parquet"  # the SAFFU study's n-gram row, if built
    if kn_path.is_file():
        rep.kn = {r["metric"]: r for r in pl.read_parquet(kn_path).iter_rows(named=True)}
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
    tables = {
        Path(tables_dir) / f"{name}.tex": lm_table(
            captions[name], label, colspec, header, rows[name]
        )
        for name, (label, colspec, header) in LM_TABLES.items()
    }
    macros = {**numbers(summary, runs, tokens_meta, params), **lm_numbers(rep)}
    render_report(
        tables, macros, template_dir, numbers_path, "pillm.lm.report from results/<name>/summary"
    )


def lm_table(
    caption: str, label: str, colspec: str, header: list[str], rows: list[list[str]]
) -> Table:
    """An LM table: top of the page, small type, nothing shown where a table has no rows."""
    return Table(caption, label, colspec, header, rows, "t", "small", "4pt", empty=None)


def aggregate(
    metrics_paths: list[str],
    curve_paths: list[str],
    solve_paths: list[str],
    sample_paths: list[str],
    variants: list[str],
    seeds: list[int],
    out_dir: str,
) -> None:
    out = Path(out_dir)
    runs = read_runs(metrics_paths)
    write_parquet(runs, out / "runs.parquet")
    write_parquet(stack_parquet(curve_paths), out / "curves.parquet")
    write_parquet(stack_parquet(solve_paths), out / "solves.parquet")
    write_parquet(read_runs(sample_paths), out / "samples.parquet")
    write_parquet(summarise(runs, {"variant": variants}, seeds), out / "lm.parquet")
    seed_rows = runs.select(pl.col("variant").alias("arm"), "seed", "metric", "value")
    write_claim_frame(out / "claims" / "lm.parquet", seed_rows.iter_rows(named=True))


# ---- Paired comparisons and macros of the LM study ------------------------------------------


TARGET_VARIANTS = ["attn_then_pil", "attn_then_tp", "attn_then_distill", "attn_then_fgrad"]
STRATEGY_VARIANTS = [
    "pil_then_attn",
    "frozen_ffn_attn",
    "attn_then_pil",
    "attn_then_tp",
    "pil_pure",
]
CONTRIBUTION_VARIANTS = ["baseline", "attn_only", "attn_only_matched", "ffn_only", "linear_ffn"]
FEATURE_VARIANTS = ["refit_single", "refit", "refit_single8d"]
WIDTH_SWEEP = {  # single-projection refits: variant -> feature width in units of d
    "refit_single1d": 1,
    "refit_single2d": 2,
    "refit_single": 4,
    "refit_single8d": 8,
    "refit_single16d": 16,
}
FEATURE_WIDTH = {
    "refit_single": "$4d$ (1 proj.)",
    "refit": "$2{\\times}4d$ (Bi-PIL)",
    "refit_single8d": "$8d$ (1 proj.)",
}


def per_seed(runs: pl.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """{variant: {seed: value}} of one metric."""
    out: dict[str, dict[int, float]] = {}
    for r in runs.filter(pl.col("metric") == metric).iter_rows(named=True):
        out.setdefault(r["variant"], {})[int(r["seed"])] = r["value"]
    return out


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], float | None]:
    """Differences a - b over common seeds and the two-sided paired t-test p-value (n >= 2)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        return diffs, None
    return diffs, float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def fmt_p(p: float | None) -> str:
    if p is None:
        return MISSING
    return "$<$0.001" if p < 0.001 else f"{p:.3f}"


class LMReport:
    def __init__(
        self, summary: pl.DataFrame, runs: pl.DataFrame, variants: list[str], unigram_loss: float
    ):
        self.variants = variants
        self.unigram = unigram_loss
        self.m: dict[str, dict[str, dict[str, Any]]] = metric_table(summary)
        self.runs = runs
        self.loss = per_seed(runs, "test_loss")
        self.ppl = per_seed(runs, "test_ppl")
        self.kn: dict[str, dict[str, Any]] | None = None  # metric -> summary row (SAFFU study)

    def has(self, *names: str) -> bool:
        return all(n in self.variants and n in self.m for n in names)

    def pm(self, variant: str, metric: str, digits: int = 1, scale: float = 1.0) -> str:
        """Mean ± 95 % t-interval half-width over seeds (the mean alone with one seed)."""
        r = self.m[variant].get(metric)
        if r is None:
            return MISSING
        half = None if r["ci95"] is None else r["ci95"] * scale
        return fmt_pm(r["mean"] * scale, half, digits)

    def mean(self, variant: str, metric: str) -> float:
        return self.m[variant][metric]["mean"]

    def main_rows(self) -> list[list[str]]:
        rows = []
        for v in self.variants:
            r = self.m[v]
            rows.append(
                [
                    VARIANTS[v].label,
                    fmt_num(self.mean(v, "params_trainable") / 1e6, 2),
                    fmt_num(self.mean(v, "params_solved") / 1e6, 2),
                    self.pm(v, "grad_time_s", 1),
                    self.pm(v, "solve_time_s", 2),
                    self.pm(v, "test_ppl", 1),
                    self.pm(v, "test_acc", 1, 100),
                    self.pm(v, "test_bpb", 3),
                    self.pm(v, "lambada_acc", 1, 100),
                    f"{r['test_ppl']['n']}/{r['test_ppl']['n_expected']}",
                ]
            )
        return rows

    def share(self, variant: str) -> tuple[float, float | None]:
        """Loss-based share (L_uni - L_v) / (L_uni - L_full), per seed, then mean and 95 % CI."""
        full = self.loss["baseline"]
        vals = [
            loss_share(self.unigram, self.loss[variant][s], full[s])
            for s in sorted(set(full) & set(self.loss[variant]))
        ]
        return mean_ci(vals)

    def ratio(self, variant: str) -> tuple[float, float | None]:
        """The seed outline's measure: PPL_full / PPL_variant, per seed, then mean and 95 % CI."""
        full = self.ppl["baseline"]
        return mean_ci(
            [full[s] / self.ppl[variant][s] for s in sorted(set(full) & set(self.ppl[variant]))]
        )

    def contribution_rows(self) -> list[list[str]]:
        rows = [["Unigram (train counts)", fmt_num(math.exp(self.unigram), 1), MISSING, "0.0"]]
        rows += self.kneser_ney_rows()
        for v in CONTRIBUTION_VARIANTS:
            if self.has(v):
                r_mean, r_std = self.ratio(v)
                s_mean, s_std = self.share(v)
                rows.append(
                    [
                        VARIANTS[v].label,
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(100 * r_mean, _s(r_std), 1),
                        fmt_pm(100 * s_mean, _s(s_std), 1),
                    ]
                )
        return rows

    def kneser_ney_rows(self) -> list[list[str]]:
        """The SAFFU study's interpolated Kneser-Ney model on the full train split and the same
        test tokens (``summary/kneser_ney.parquet``), when this build has it: deterministic, so
        its ratio and share use the baseline's seed mean."""
        kn = self.kn
        if not kn or "test_ppl" not in kn or not self.has("baseline"):
            return []
        ppl, loss = kn["test_ppl"], kn["test_loss"]["mean"]
        order = kn["order"]["mean"] if "order" in kn else None
        share = loss_share(self.unigram, loss, self.mean("baseline", "test_loss"))
        return [
            [
                f"Kneser-Ney {fmt_num(order, 0)}-gram (train counts)",
                fmt_pm(ppl["mean"], ppl.get("ci95"), 1),
                fmt_num(100 * self.mean("baseline", "test_ppl") / ppl["mean"], 1),
                fmt_num(100 * share, 1),
            ]
        ]

    def feature_rows(self) -> list[list[str]]:
        rows = []
        for v in FEATURE_VARIANTS:
            if self.has(v, "baseline"):
                diffs, p = paired(self.ppl[v], self.ppl["baseline"])
                d_mean, d_std = mean_ci(diffs)
                rows.append(
                    [
                        FEATURE_WIDTH[v],
                        fmt_num(self.mean(v, "params_solved") / 1e6, 2),
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(d_mean, d_std, 2),
                        self.pm(v, "solve_time_s", 2),
                        f"{self.mean(v, 'kappa_max'):.1e}",
                    ]
                )
        return rows

    def strategy_rows(self) -> list[list[str]]:
        return [
            [
                VARIANTS[v].label,
                self.pm(v, "test_ppl", 1),
                self.pm(v, "test_acc", 1, 100),
                self.pm(v, "train_time_s", 1),
            ]
            for v in STRATEGY_VARIANTS
            if self.has(v)
        ]

    def target_comparison(
        self, variant: str, reference: str
    ) -> tuple[float, float | None, float | None]:
        """Test-loss change vs the reference (negative = better), its 95 % CI half-width and
        paired p-value."""
        diffs, p = paired(self.loss[variant], self.loss[reference])
        mean, std = mean_ci(diffs)
        return mean, std, p

    def target_rows(self) -> list[list[str]]:
        rows = []
        pairs = [(v, "attn_only") for v in TARGET_VARIANTS] + [(v, "baseline") for v in ("refit",)]
        for v, ref in pairs:
            if self.has(v, ref):
                d, s, p = self.target_comparison(v, ref)
                rows.append(
                    [
                        VARIANTS[v].label,
                        VARIANTS[ref].label,
                        self.pm(v, "test_ppl", 1),
                        fmt_pm(d, s, 4),
                        fmt_p(p),
                    ]
                )
        return rows


def mean_ci(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and 95 % t-interval half-width of per-seed values (None below two values)."""
    mean, std = mean_std(xs)
    return mean, ci95(std, sum(1 for x in xs if finite(x)))


def _s(x: float | None) -> float | None:
    return None if x is None else 100 * x


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
        out["RatioAttnOnly"] = fmt_pm(100 * r, _s(rs), 1)
        out["ShareAttnOnly"] = fmt_pm(100 * s, _s(ss), 1)
    if rep.has("baseline", "ffn_only"):
        s, ss = rep.share("ffn_only")
        out["ShareFfnOnly"] = fmt_pm(100 * s, _s(ss), 1)
    for v in TARGET_VARIANTS:
        if rep.has(v, "attn_only"):
            d, s, p = rep.target_comparison(v, "attn_only")
            out[f"DeltaLoss{variant_macro(v)}"] = fmt_pm(d, s, 4)
            out[f"PValue{variant_macro(v)}"] = fmt_p(p)
    return out
