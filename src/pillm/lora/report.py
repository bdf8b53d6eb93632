"""The SST-2 study: aggregation, the claim frame, the table and the macros (the figure:
``lora.figures``).

``aggregate_lora`` turns every job's tidy ``metrics.json`` into one row per (model, method) job
(``summary/lora.parquet``; models are ``<group>-s<seed>``; the expected grid is a cross join, so
a missing job is a row of nulls, not an absent row), stacks the curves
(``summary/lora_curves.parquet``: LoRA's dev accuracy along every learning rate's run, the heads'
single points) and writes the study's claim frame (``summary/claims/lora.parquet``: arm
``<group>_<method>``, seed, validation accuracy in percent). Tables, macros and the figure read
only the summaries. Values are means over seeds, ± the sample std where there are several.
Every macro of every known group and method is defined (``--`` where the build lacks it), so
the manuscript compiles for any configuration.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, mean_std, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet
from pillm.paper.verdicts import TRAINED_METRIC

GROUPS = {"pillm": "Pillm", "minilm": "MiniLM"}  # group -> macro infix, display order
GROUP_NAMES = {"pillm": "\\pillm{}", "minilm": "MiniLM"}  # group -> its name in the prose
LORA_TARGET_TEXT = {  # lora.lora_modules -> the maps LoRA adapts, in the paper's words
    "all_linear": "every linear map inside the blocks (the attention's input and output "
    "projections and both FFN maps)",
    "attention": "the attention projections (MiniLM: query and value; the pillm baseline: its "
    "fused query/key/value projection)",
}
METHODS = {  # method -> (table label, macro infix), display order
    "pil_lora": ("Random-feature head (PIL, closed form)", "PilLora"),
    "ridge": ("Ridge readout (closed form)", "Ridge"),
    "pil_adapter": ("In-layer PIL adapter (closed form)", "PilAdapter"),
    "lora": ("LoRA (\\texttt{peft}, AdamW, tuned)", "Lora"),
}
INDEX = ["model", "method"]
CONTEXT = ["model_group", "model_label", "seed", "device", "device_name", "data_policy",
           "weights_sha256", "git_rev"]  # fmt: skip
P_FLOOR = 1e-10  # fmt_p: smaller p-values print as a bound
CLAIM_METRICS = {"accuracy": "accuracy", "dev_accuracy": "dev_accuracy"}  # frame <- summary


# ---------------------------------------------------------------- aggregation


def arm(group: str, method: str) -> str:
    """The claim frame's arm of a base model group and a method (paper/claims/lora.yaml)."""
    return f"{group}_{method}"


def claim_rows(jobs: pl.DataFrame) -> list[dict]:
    """Seed rows of the claim frame: every finished job's accuracies, in percent, and for the
    gradient opponent (LoRA) whether it trained (metric ``trained``, 1 or 0; the claims file
    lists its arms under ``opponents:``)."""
    rows = []
    for r in jobs.iter_rows(named=True):
        if r.get("seed") is None:
            continue
        key = {"arm": arm(r["model_group"], r["method"]), "seed": int(r["seed"])}
        for metric, col in CLAIM_METRICS.items():
            if finite(r.get(col)):
                rows.append({**key, "metric": metric, "value": 100 * r[col]})
        if finite(r.get(TRAINED_METRIC)):
            rows.append({**key, "metric": TRAINED_METRIC, "value": float(r[TRAINED_METRIC])})
    return rows


def aggregate_lora(
    metrics_paths: list[str], curve_paths: list[str], jobs: list[str], out_dir: str
) -> None:
    """One row per expected job ``model/method`` (nulls where a job is missing), the curves
    and the claim frame ``claims/lora.parquet`` under ``out_dir``."""
    wide = pivot_records(metrics_paths, INDEX + CONTEXT)
    expected = pl.DataFrame([j.split("/", 1) for j in jobs], schema=INDEX, orient="row")
    out = expected.join(wide, on=INDEX, how="left").with_columns(
        pl.coalesce("model_group", pl.col("model").str.replace(r"-s\d+$", "")),
        pl.coalesce(
            pl.col("seed").cast(pl.Int64), pl.col("model").str.extract(r"-s(\d+)$").cast(pl.Int64)
        ),  # fmt: skip
    )
    if (n := out["accuracy"].null_count()) > 0:
        print(f"warning: {n} expected lora jobs have no records")
    out_d = Path(out_dir)
    out = out.sort("model", "method")
    write_parquet(out, out_d / "lora.parquet")
    curves = concat_parquet(curve_paths)
    write_parquet(curves.sort("model", "method", "step"), out_d / "lora_curves.parquet")
    write_claim_frame(out_d / "claims" / "lora.parquet", seed_rows=claim_rows(out))


# ---------------------------------------------------------------- report


def fmt_int(x: float | None) -> str:
    return fmt_num(x, 0) if finite(x) else MISSING


def fmt_diff(x: float | None) -> str:
    """0 exactly, else scientific notation."""
    if not finite(x):
        return MISSING if x is None else "$\\infty$"
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    return f"${x / 10**exp:.1f}{{\\times}}10^{{{exp}}}$"


def fmt_grid(values: list[float]) -> str:
    """'$10^{-6}$, ..., $1$' for powers of ten, plain numbers otherwise."""
    out = []
    for v in values:
        k = math.log10(v) if v > 0 else None
        out.append(
            f"$10^{{{round(k)}}}$" if k is not None and k == round(k) and k != 0 else f"{v:g}"
        )
    return ", ".join(out)


def fmt_p(p: float) -> str:
    """A p-value: two decimals from 0.01, scientific notation below, and below ``P_FLOOR``
    '$<10^{-10}$' (a binomial p that small underflows to 0 for large leads, and says no more
    than "far below any alpha")."""
    if p >= 0.01:
        return fmt_num(p, 2)
    return f"$<10^{{{round(math.log10(P_FLOOR))}}}$" if p < P_FLOOR else fmt_diff(p)


def fmt_ratio(x: float | None) -> str:
    return MISSING if not finite(x) else f"{fmt_num(x, 1 if x < 100 else 0)}$\\times$"


class LoraReport:
    """Rows and macros from ``lora.parquet`` and ``lora_curves.parquet``."""

    def __init__(self, jobs: pl.DataFrame, curves: pl.DataFrame, params: dict):
        self.jobs, self.curves, self.params = jobs, curves, params
        present = set(jobs["model_group"].to_list())
        self.groups = [g for g in GROUPS if g in present]
        self.methods = [m for m in METHODS if m in set(jobs["method"].to_list())]

    def rows_of(self, group: str, method: str) -> list[dict]:
        return self.jobs.filter(
            (pl.col("model_group") == group) & (pl.col("method") == method)
        ).to_dicts()

    def stat(self, group: str, method: str, col: str) -> tuple[float | None, float | None]:
        return mean_std([r.get(col) for r in self.rows_of(group, method)])

    def pm(self, group: str, method: str, col: str, digits: int, scale: float = 1.0) -> str:
        m, s = self.stat(group, method, col)
        if m is None:
            return MISSING
        return fmt_pm(m * scale, None if s is None else s * scale, digits)

    def count(self, group: str, method: str, col: str) -> str:
        """'k/n': jobs whose 0/1 metric ``col`` is 1, of the jobs with records."""
        done = [r[col] for r in self.rows_of(group, method) if finite(r.get(col))]
        return f"{sum(int(v) for v in done)}/{len(done)}" if done else MISSING

    def label(self, group: str) -> str:
        rows = self.jobs.filter(pl.col("model_group") == group)
        labels = [x for x in rows["model_label"].to_list() if x]
        n = rows["model"].n_unique()
        text = tex_escape(labels[0] if labels else group)
        return f"{text} ({n} seeds)" if n > 1 else text

    def device(self, group: str) -> str:
        names = sorted({x for x in self.jobs.filter(pl.col("model_group") == group)["device_name"]
                        .to_list() if x})  # fmt: skip
        return tex_escape(" / ".join(names)) if names else MISSING

    def devices_sentence(self) -> str:
        """Where each model's jobs ran, said once when every model's ran on the same device."""
        devices = {g: self.device(g) for g in self.groups}
        if not devices:
            return "No jobs ran"
        if len(devices) > 1 and len(set(devices.values())) == 1:
            every = "Both" if len(devices) == 2 else "All"
            return f"{every} models' jobs ran on {devices[self.groups[0]]}"
        parts = [f"{GROUP_NAMES[g]} jobs{' ran' if i == 0 else ''} on {d}"
                 for i, (g, d) in enumerate(devices.items())]  # fmt: skip
        return "The " + " and the ".join(parts)

    def lora_curve(self, model: str) -> pl.DataFrame:
        """The chosen learning rate's run of one model's LoRA job (dev accuracy by step)."""
        c = self.curves.filter((pl.col("model") == model) & (pl.col("method") == "lora"))
        if "chosen" in c.columns:
            c = c.filter(pl.col("chosen") == 1.0)
        return c.sort("step")

    def time_to(self, group: str, method: str) -> tuple[float | None, int, int]:
        """Seconds LoRA's chosen run trained until its dev accuracy first reached ``method``'s
        (mean over the seeds that reached it), how many did, of how many with both records."""
        ref = {r["model"]: r.get("dev_accuracy") for r in self.rows_of(group, method)}
        reached, n = [], 0
        for model, acc in ref.items():
            c = self.lora_curve(model)
            if not finite(acc) or c.height == 0 or "dev_accuracy" not in c.columns:
                continue
            n += 1
            hit = c.filter(pl.col("dev_accuracy") >= acc)
            if hit.height:
                reached.append(float(hit["fit_seconds"][0]))
        return mean_std(reached)[0], len(reached), n

    def chosen(self, group: str, method: str, col: str, fmt=None) -> str:
        """The values a selection chose (LoRA's rate, the adapter's η), each with how many
        seeds chose it."""
        vals = [r[col] for r in self.rows_of(group, method) if finite(r.get(col))]
        if not vals:
            return MISSING
        fmt = fmt or (lambda v: f"{v:g}")
        return ", ".join(f"{fmt(v)} ({vals.count(v)}/{len(vals)})" for v in sorted(set(vals)))

    def table_rows(self) -> list[list[str] | str]:
        rows: list[list[str] | str] = []
        for g in self.groups:
            if rows:
                rows.append("midrule")
            for i, m in enumerate(self.methods):
                rows.append(
                    [
                        self.label(g) if i == 0 else "",
                        METHODS[m][0],
                        self.pm(g, m, "accuracy", 1, 100),
                        self.pm(g, m, "dev_accuracy", 1, 100),
                        self.pm(g, m, "fit_seconds", 2),
                        self.pm(g, m, "tune_seconds", 2),
                        self.pm(g, m, "peak_memory_mb", 0),
                        fmt_int(self.stat(g, m, "trainable_params")[0]),
                        self.count(g, m, "identical_rerun"),
                        fmt_diff(self.stat(g, m, "max_abs_diff")[0]),
                    ]
                )
        return rows

    def numbers(self) -> dict[str, str]:
        p = self.params
        seeds = [int(s) for s in p["seeds"]]
        macros = {
            "LoraNTrain": fmt_int(p["n_train"]) if p["n_train"] else "all",
            "LoraNDev": fmt_int(p["n_dev"]),
            "LoraMaxLen": str(p["max_len"]),
            "LoraPilRank": fmt_int(p["pil_rank"]),
            "LoraRank": str(p["lora_rank"]),
            "LoraAlpha": fmt_num(p["lora_alpha"], 0),
            "LoraDropout": fmt_num(p["lora_dropout"], 2),
            "LoraTargets": LORA_TARGET_TEXT[p.get("lora_modules", "all_linear")],
            "LoraMaxSteps": fmt_int(p["max_steps"]),
            "LoraWarmup": fmt_int(self._first("warmup_steps")),
            "LoraWeightDecay": f"{p['weight_decay']:g}",
            "LoraLrGrid": ", ".join(fmt_sci(v) for v in p["lrs"]),
            "LoraNLrs": str(len(p["lrs"])),
            "LoraLrExtend": str(p.get("lr_extend", 0)),
            "LoraTrainBatch": str(p["train_batch_size"]),
            "LoraBatch": str(p["batch_size"]),
            "LoraEvalEvery": fmt_int(p["eval_every"]),
            "LoraPatience": str(p["patience"]),
            "LoraMinSteps": fmt_int(p.get("min_steps", 0)),
            "LoraPatienceFrom": fmt_int(self._first("patience_from")),
            "LoraTrainedAlpha": fmt_sci(p["trained_alpha"]),
            "LoraSeeds": ", ".join(map(str, seeds)),
            "LoraNSeeds": str(len(seeds)),
            "LoraNModels": str(len(p["models"])),  # base models of lora.models
            "LoraLambdaGrid": fmt_grid(p["lambdas"]),
            "LoraKappaMax": fmt_diff(p["kappa_max"]),
            "LoraNEval": fmt_int(self._first("n_eval")),
            "LoraNFit": fmt_int(self._first("n_train")),
            "LoraScale": tex_escape(p["name"]),
            "LoraNJobs": str(self.jobs["accuracy"].drop_nulls().len()),
            "LoraNExpected": str(self.jobs.height),
            "LoraIdentical": f"{int(self.jobs['identical_rerun'].drop_nulls().sum())}",
        }
        macros["LoraDevices"] = self.devices_sentence()
        for g, gi in GROUPS.items():
            macros[f"Lora{gi}Device"] = self.device(g) if g in self.groups else MISSING
            macros[f"Lora{gi}NSeeds"] = str(
                self.jobs.filter(pl.col("model_group") == g)["model"].n_unique()
            )
            for m, (_, mi) in METHODS.items():
                k = f"Lora{gi}{mi}"
                macros[k + "Acc"] = self.pm(g, m, "accuracy", 1, 100)
                macros[k + "DevAcc"] = self.pm(g, m, "dev_accuracy", 1, 100)
                macros[k + "Fit"] = self.pm(g, m, "fit_seconds", 2)
                macros[k + "Tune"] = self.pm(g, m, "tune_seconds", 2)
                macros[k + "Mem"] = self.pm(g, m, "peak_memory_mb", 0)
                macros[k + "Params"] = fmt_int(self.stat(g, m, "trainable_params")[0])
                macros[k + "Identical"] = self.count(g, m, "identical_rerun")
                macros[k + "MaxDiff"] = fmt_diff(self.stat(g, m, "max_abs_diff")[0])
            pil_fit = self.stat(g, "pil_lora", "fit_seconds")[0]
            for col, name in (("fit_seconds", "FitRatio"), ("tune_seconds", "TuneRatio")):
                lora = self.stat(g, "lora", col)[0]
                ratio = lora / pil_fit if finite(lora) and finite(pil_fit) and pil_fit else None
                macros[f"Lora{gi}{name}"] = fmt_ratio(ratio)
            for m in ("pil_lora", "ridge", "pil_adapter"):
                mi = METHODS[m][1]
                t, k, n = self.time_to(g, m)
                macros[f"Lora{gi}Reach{mi}"] = f"{k}/{n}" if n else MISSING
                macros[f"Lora{gi}TimeTo{mi}"] = f"{fmt_num(t, 2)}\\,s" if finite(t) else MISSING
                ref = self.stat(g, m, "fit_seconds")[0]
                to = t / ref if finite(t) and finite(ref) and ref else None
                macros[f"Lora{gi}TimeTo{mi}Ratio"] = fmt_ratio(to)
                lams = sorted(  # the λ each fit chose (one per seed), from the grid
                    {r["lambda_rel"] for r in self.rows_of(g, m) if finite(r.get("lambda_rel"))}
                )
                key = f"Lora{gi}{mi}Lambda"
                macros[key] = fmt_grid([float(f"{x:.6g}") for x in lams]) if lams else MISSING
            macros[f"Lora{gi}LrChosen"] = self.chosen(g, "lora", "lr", fmt_sci)
            macros[f"Lora{gi}AdapterEta"] = self.chosen(g, "pil_adapter", "eta")
            macros[f"Lora{gi}AdapterReadoutDevAcc"] = self.pm(
                g, "pil_adapter", "readout_dev_accuracy", 1, 100
            )
            macros[f"Lora{gi}LrEdge"] = self.count(g, "lora", "lr_at_grid_edge")
            macros[f"Lora{gi}LrOnEdge"] = self.count(g, "lora", "lr_on_edge")
            ext = [r.get("lr_extensions") for r in self.rows_of(g, "lora")]
            macros[f"Lora{gi}LrExtensions"] = (
                fmt_int(sum(v for v in ext if finite(v)))
                if any(finite(v) for v in ext)
                else MISSING
            )
            macros[f"Lora{gi}StoppedEarly"] = self.count(g, "lora", "stopped_early")
            macros[f"Lora{gi}BestStep"] = self.pm(g, "lora", "best_step", 0)
            macros[f"Lora{gi}TrainLoss"] = self.pm(g, "lora", "train_loss_at_best", 3)
            macros[f"Lora{gi}TrainLossFirst"] = self.pm(g, "lora", "train_loss_first", 3)
            macros[f"Lora{gi}ChanceLoss"] = self.pm(g, "lora", "chance_loss", 3)
            macros[f"Lora{gi}StepsRun"] = self.pm(g, "lora", "steps_run", 0)
            macros[f"Lora{gi}TrainLossKept"] = self.pm(g, "lora", "train_loss_kept", 3)
            macros[f"Lora{gi}TrainAcc"] = self.pm(g, "lora", "train_accuracy", 1, 100)
            macros[f"Lora{gi}MajorityRate"] = self.pm(g, "lora", "majority_rate", 1, 100)
            ps = [r["trained_p"] for r in self.rows_of(g, "lora") if finite(r.get("trained_p"))]
            macros[f"Lora{gi}TrainedPMax"] = fmt_p(max(ps)) if ps else MISSING  # worst seed
            macros[f"Lora{gi}Trained"] = self.count(g, "lora", TRAINED_METRIC)
        return macros

    def _first(self, col: str) -> float | None:
        vals = (
            [v for v in self.jobs[col].to_list() if finite(v)] if col in self.jobs.columns else []
        )
        return vals[0] if vals else None


def fmt_sci(x: float) -> str:
    """A learning rate: '$3{\\times}10^{-4}$' (a power of ten alone: '$10^{-3}$')."""
    exp = math.floor(math.log10(x))
    mant = float(f"{x / 10**exp:.3g}")
    if mant == 1:
        return f"$10^{{{exp}}}$"
    return f"${mant:g}{{\\times}}10^{{{exp}}}$"


def load_lora(summary_dir: str | Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    d = Path(summary_dir)
    return pl.read_parquet(d / "lora.parquet"), pl.read_parquet(d / "lora_curves.parquet")


def render_lora_tables(
    summary_dir: str, params: dict, template_dir: str, table_path: str, numbers_path: str
) -> None:
    """Write the SST-2 table and the Lora* macros, through the report contract."""
    jobs, curves = load_lora(summary_dir)
    rep = LoraReport(jobs, curves, params)
    header = ["Model", "Method", "Val.\\ acc.\\ (\\%)", "Dev acc.\\ (\\%)", "Fit (s)",
              "With selection (s)", "Peak MB", "Trainable", "Identical",
              "max $|\\Delta w|$"]  # fmt: skip
    caption = (
        f"SST-2 sentiment classification on frozen base models ({tex_escape(params['name'])} "
        "scale), mean $\\pm$ std over seeds: accuracy on the 872 labelled GLUE validation "
        "sentences (no choice saw them) and on the dev split carved from GLUE train (every "
        "choice was made on it: $\\lambda$ of the closed-form heads, LoRA's learning rate and "
        "steps); fitting time of the timed fit (LoRA: its chosen rate up to its chosen step; "
        "closed-form heads: base-model passes, $\\lambda$ selection and solve) and with the "
        "selection (LoRA: every rate's early-stopped run); peak memory; trainable (solved) "
        "parameters; reruns with the same seed that reproduced the weights bit for bit, and "
        "the largest weight difference. Times compare methods only within a model (each "
        "model's jobs ran on one device, Section~\\ref{sec:lora})."
    )
    table = Table(caption, "tab:lora", "llrrrrrrrr", header, rep.table_rows())
    render_report({table_path: table}, rep.numbers(), template_dir, numbers_path,
                  "pillm.lora.report from the SST-2 summaries", prefix="Lora")  # fmt: skip
