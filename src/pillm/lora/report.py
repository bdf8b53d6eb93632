"""PIL-LoRA vs LoRA on SST-2: aggregation, the table and the macros (the figure: ``lora.figures``).

``aggregate_lora`` turns every job's tidy ``metrics.json`` into one row per (model, method) job
(``summary/lora.parquet``; the expected grid is a cross join, so a missing job is a row of
nulls, not an absent row) and stacks the accuracy-vs-time curves (``summary/lora_curves.parquet``).
Tables, macros and the figure read only those two files. Model groups: ``pillm`` holds one model
per seed of the pipeline's baseline (values are means over seeds, ± the sample std where there
are several), ``minilm`` one model. Every macro of every known group and method is defined
(``--`` where the build lacks it), so the manuscript compiles for any configuration.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from pillm.paper.latex import MISSING, finite, fmt_num, fmt_pm, mean_std, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet

GROUPS = {"pillm": "Pillm", "minilm": "MiniLM"}  # group -> macro infix, display order
METHODS = {  # method -> (table label, macro infix), display order
    "pil_lora": ("PIL-LoRA (ridge)", "PilLora"),
    "ridge": ("Ridge readout (control)", "Ridge"),
    "lora": ("LoRA (\\texttt{peft}, AdamW)", "Lora"),
}
INDEX = ["model", "method"]
CONTEXT = ["model_group", "model_label", "seed", "device", "device_name", "data_policy",
           "weights_sha256", "git_rev"]  # fmt: skip


# ---------------------------------------------------------------- aggregation


def aggregate_lora(
    metrics_paths: list[str], curve_paths: list[str], jobs: list[str], out_dir: str
) -> None:
    """One row per expected job ``model/method`` (nulls where a job is missing) + the curves."""
    wide = pivot_records(metrics_paths, INDEX + CONTEXT)
    expected = pl.DataFrame(
        [j.split("/", 1) for j in jobs], schema=INDEX, orient="row"
    ).with_columns(pl.col("model").str.replace(r"-s\d+$", "").alias("group_key"))
    out = expected.join(wide, on=INDEX, how="left")
    out = out.with_columns(
        pl.coalesce("model_group", pl.col("group_key").str.replace("pillm-s.*", "pillm"))
    ).drop("group_key")
    if (n := out["accuracy"].null_count()) > 0:
        print(f"warning: {n} expected lora jobs have no records")
    out_d = Path(out_dir)
    write_parquet(out.sort("model", "method"), out_d / "lora.parquet")
    curves = concat_parquet(curve_paths)
    write_parquet(curves.sort("model", "method", "step"), out_d / "lora_curves.parquet")


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

    def identical(self, group: str, method: str) -> str:
        """'k/n': fits whose rerun gave bit-identical weights, of the jobs with records."""
        vals = [r["identical_rerun"] for r in self.rows_of(group, method)]
        done = [v for v in vals if finite(v)]
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

    def time_to_pil(self, group: str) -> tuple[float | None, int, int]:
        """Seconds LoRA's training took to first reach PIL-LoRA's accuracy on the 872 (mean over
        the models that reached it), how many did, and of how many models with both records."""
        pil = {r["model"]: r["accuracy"] for r in self.rows_of(group, "pil_lora")}
        reached, n = [], 0
        for model, acc in pil.items():
            c = self.curves.filter((pl.col("model") == model) & (pl.col("method") == "lora"))
            if not finite(acc) or c.height == 0:
                continue
            n += 1
            hit = c.filter(pl.col("accuracy") >= acc).sort("step")
            if hit.height:
                reached.append(float(hit["fit_seconds"][0]))
        return mean_std(reached)[0], len(reached), n

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
                        self.pm(g, m, "fit_seconds", 2),
                        self.pm(g, m, "capture_seconds", 2),
                        self.pm(g, m, "peak_memory_mb", 0),
                        fmt_int(self.stat(g, m, "trainable_params")[0]),
                        self.identical(g, m),
                        fmt_diff(self.stat(g, m, "max_abs_diff")[0]),
                    ]
                )
        return rows

    def numbers(self) -> dict[str, str]:
        p = self.params
        macros = {
            "LoraNTrain": fmt_int(p["n_train"]) if p["n_train"] else "all",
            "LoraNSelect": fmt_int(p["n_select"]),
            "LoraMaxLen": str(p["max_len"]),
            "LoraPilRank": fmt_int(p["pil_rank"]),
            "LoraRank": str(p["lora_rank"]),
            "LoraAlpha": fmt_num(p["lora_alpha"], 0),
            "LoraDropout": fmt_num(p["lora_dropout"], 2),
            "LoraSteps": fmt_int(p["steps"]),
            "LoraWarmup": fmt_int(self._first("warmup_steps")),
            "LoraWeightDecay": f"{p['weight_decay']:g}",
            "LoraLR": f"{p['lr']:g}",
            "LoraTrainBatch": str(p["train_batch_size"]),
            "LoraBatch": str(p["batch_size"]),
            "LoraEvalEvery": fmt_int(p["eval_every"] or p["steps"]),  # 0: only after the last step
            "LoraSeed": str(p["seed"]),
            "LoraLambdaGrid": fmt_grid(p["lambdas"]),
            "LoraKappaMax": fmt_diff(p["kappa_max"]),
            "LoraNEval": fmt_int(self._first("n_eval")),
            "LoraNFit": fmt_int(self._first("n_train")),
            "LoraScale": tex_escape(p["name"]),
            "LoraNJobs": str(self.jobs["accuracy"].drop_nulls().len()),
            "LoraNExpected": str(self.jobs.height),
            "LoraIdentical": f"{int(self.jobs['identical_rerun'].drop_nulls().sum())}",
        }
        for g, gi in GROUPS.items():
            macros[f"Lora{gi}Device"] = self.device(g) if g in self.groups else MISSING
            macros[f"Lora{gi}NModels"] = str(
                self.jobs.filter(pl.col("model_group") == g)["model"].n_unique()
            )
            for m, (_, mi) in METHODS.items():
                k = f"Lora{gi}{mi}"
                macros[k + "Acc"] = self.pm(g, m, "accuracy", 1, 100)
                macros[k + "Fit"] = self.pm(g, m, "fit_seconds", 2)
                macros[k + "Mem"] = self.pm(g, m, "peak_memory_mb", 0)
                macros[k + "Params"] = fmt_int(self.stat(g, m, "trainable_params")[0])
                macros[k + "Identical"] = self.identical(g, m)
                macros[k + "MaxDiff"] = fmt_diff(self.stat(g, m, "max_abs_diff")[0])
            pil_fit = self.stat(g, "pil_lora", "fit_seconds")[0]
            lora_fit = self.stat(g, "lora", "fit_seconds")[0]
            ratio = lora_fit / pil_fit if finite(lora_fit) and finite(pil_fit) else None
            macros[f"Lora{gi}FitRatio"] = fmt_ratio(ratio)
            t, k, n = self.time_to_pil(g)
            macros[f"Lora{gi}ReachPil"] = f"{k}/{n}" if n else MISSING
            macros[f"Lora{gi}TimeToPil"] = f"{fmt_num(t, 2)}\\,s" if finite(t) else MISSING
            to_pil = t / pil_fit if finite(t) and finite(pil_fit) else None
            macros[f"Lora{gi}TimeToPilRatio"] = fmt_ratio(to_pil)
            for m in ("pil_lora", "ridge"):  # the λ each fit chose (one per seed), from the grid
                lams = sorted(
                    {r["lambda_rel"] for r in self.rows_of(g, m) if finite(r.get("lambda_rel"))}
                )
                key = f"Lora{gi}{METHODS[m][1]}Lambda"
                macros[key] = fmt_grid([float(f"{x:.6g}") for x in lams]) if lams else MISSING
        return macros

    def _first(self, col: str) -> float | None:
        vals = (
            [v for v in self.jobs[col].to_list() if finite(v)] if col in self.jobs.columns else []
        )
        return vals[0] if vals else None


def load_lora(summary_dir: str | Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    d = Path(summary_dir)
    return pl.read_parquet(d / "lora.parquet"), pl.read_parquet(d / "lora_curves.parquet")


def render_lora_tables(
    summary_dir: str, params: dict, template_dir: str, table_path: str, numbers_path: str
) -> None:
    """Write the SST-2 table and the Lora* macros, through the report contract."""
    jobs, curves = load_lora(summary_dir)
    rep = LoraReport(jobs, curves, params)
    header = ["Model", "Method", "Acc.\\ (\\%)", "Fit (s)", "Capture (s)", "Peak MB",
              "Trainable", "Identical", "max $|\\Delta w|$"]  # fmt: skip
    caption = (
        f"SST-2 sentiment classification on the frozen base models ({tex_escape(params['name'])} "
        "scale): accuracy on the 872 labelled GLUE validation sentences, fitting time of the "
        "timed (second) fit, of which base-model forward passes (PIL methods), peak memory, "
        "trainable (solved) parameters, and how many reruns with the same seed reproduced the "
        "weights bit for bit, with the largest absolute weight difference between the two fits. "
        "Times compare methods only within a model (each model's jobs ran on one device, "
        "Section~\\ref{sec:lora})."
    )
    table = Table(caption, "tab:lora", "llrrrrrrr", header, rep.table_rows())
    render_report({table_path: table}, rep.numbers(), template_dir, numbers_path,
                  "pillm.lora_report from the lora summaries", prefix="Lora")  # fmt: skip
