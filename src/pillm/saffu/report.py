"""Aggregation, tables and macros of the SAFFU explicit-solution baseline.

``aggregate_saffu`` stacks every SAFFU run (``metrics.json``, ``curve.parquet``) into
``summary/saffu_runs.parquet`` (tidy rows as written), ``summary/saffu.parquet`` (mean, std and
n over seeds per setting x init x metric, on the expected grid, so a missing run shows as
``n < n_expected``) and ``summary/saffu_curves.parquet``. The tables, macros and figures read
only these summaries, plus the LM summary (``lm.parquet``) for the rows placed beside SAFFU: the
GPT baseline and PIL's ridge solve (``pil_pure``) when this build has them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from pillm.paper.latex import MISSING, fmt_num, fmt_pm, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import concat_parquet, read_runs, summarise, write_parquet

GROUP = ["variant", "init", "agg", "block", "radius", "corpus", "tokenizer", "data_policy"]


# ---------------------------------------------------------------- aggregation


def aggregate_saffu(
    metrics_paths: list[str], curve_paths: list[str], params: dict, out_dir: str
) -> None:
    out = Path(out_dir)
    runs = read_runs(metrics_paths)
    write_parquet(runs, out / "saffu_runs.parquet")
    grid = {"variant": params["settings"], "init": params["inits"]}
    summary = summarise(runs, grid, params["seeds"], group=[*GROUP, "metric"],
                        what="SAFFU runs (setting, init, seed)")  # fmt: skip
    write_parquet(summary, out / "saffu.parquet")
    curves = concat_parquet(curve_paths)
    write_parquet(curves.sort("variant", "init", "seed", "step"), out / "saffu_curves.parquet")


# ---------------------------------------------------------------- report


def _get(cell: dict | None, key: str = "mean") -> float | None:
    return None if cell is None else cell.get(key)


class SaffuReport:
    """Rows of the SAFFU tables and the Saffu* macros, from the SAFFU and LM summaries."""

    def __init__(self, summary: pl.DataFrame, lm: pl.DataFrame | None, params: dict):
        self.params = params
        self.main = params["main_setting"]
        self.cells: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.settings: dict[str, dict[str, Any]] = {}
        for r in summary.iter_rows(named=True):
            self.cells[(r["variant"], r["init"], r["metric"])] = r
            self.settings.setdefault(
                r["variant"], {k: r[k] for k in ("agg", "block", "radius", "tokenizer")}
            )
        self.lm: dict[tuple[str, str], dict[str, Any]] = {}
        if lm is not None:
            for r in lm.iter_rows(named=True):
                self.lm[(r["variant"], r["metric"])] = r

    def cell(self, setting: str, init: str, metric: str) -> dict | None:
        return self.cells.get((setting, init, metric))

    def ppl(self, setting: str, kind: str) -> dict | None:
        """Test perplexity cell of one row kind: the explicit solution alone (the warm runs
        before AdamW), warm (explicit then AdamW) or cold (random then AdamW)."""
        if kind == "explicit":
            return self.cell(setting, "explicit", "init_test_ppl")
        return self.cell(setting, "explicit" if kind == "warm" else "random", "test_ppl")

    def ordered_settings(self) -> list[str]:
        rest = sorted(s for s in self.settings if s != self.main)
        return ([self.main] if self.main in self.settings else []) + rest

    def describe(self, setting: str) -> str:
        s = self.settings.get(setting)
        if s is None:
            return MISSING
        return f"{s['agg']}, $b{{=}}{s['block']}$, $r{{=}}{s['radius']}$"

    # -- tables

    def main_rows(self) -> list[list[str]]:
        """GPT baseline and PIL ridge (from the LM summary) beside the three SAFFU rows."""
        rows = []
        lm_rows = [
            ("baseline", "GPT baseline (AdamW)", "next-token CE, backprop. through all layers"),
            ("pil_pure", "PIL pure (ridge, no gradient)", "squared error to target-prop. "
             "targets; ridge on random GELU features"),
        ]  # fmt: skip
        for variant, label, objective in lm_rows:
            ppl = self.lm.get((variant, "test_ppl"))
            if ppl is None:
                continue

            def m(metric: str, scale: float = 1.0, digits: int = 2, v: str = variant) -> str:
                c = self.lm.get((v, metric))
                return MISSING if c is None else fmt_num(c["mean"] * scale, digits)

            rows.append(
                [
                    label, objective, m("params_trainable", 1e-6), m("params_solved", 1e-6),
                    m("solve_time_s", digits=1), m("grad_time_s", digits=1),
                    fmt_pm(ppl["mean"], ppl["std"], 1), m("test_bpb", digits=3),
                ]
            )  # fmt: skip
        s = self.main
        params = _get(self.cell(s, "explicit", "params")) or _get(self.cell(s, "random", "params"))
        p = fmt_num(None if params is None else params / 1e6, 2)
        saffu_rows = [
            ("explicit", "SAFFU explicit solution", "softmax CE; stationary point from log "
             "co-occurrences (one pass)", "0", p),
            ("warm", "SAFFU explicit $\\to$ AdamW (warm)", "softmax CE; explicit start, then "
             "AdamW", p, p),
            ("random", "SAFFU random $\\to$ AdamW (cold)", "softmax CE; random start, then "
             "AdamW", p, "0"),
        ]  # fmt: skip
        for kind, label, objective, trained, solved in saffu_rows:
            init = "random" if kind == "random" else "explicit"
            ppl = self.ppl(s, kind)
            solve = self.cell(s, init, "solve_time_s")
            grad = None if kind == "explicit" else self.cell(s, init, "train_time_s")
            bpb = self.cell(s, init, "init_test_bpb" if kind == "explicit" else "test_bpb")
            rows.append(
                [
                    label, objective, trained, solved,
                    fmt_num(_get(solve), 1), "0" if kind == "explicit" else fmt_num(_get(grad), 1),
                    fmt_pm(_get(ppl), _get(ppl, "std"), 1), fmt_num(_get(bpb), 3),
                ]
            )  # fmt: skip
        return rows

    def ablation_rows(self) -> list[list[str]]:
        rows = []
        for s in self.ordered_settings():
            st = self.settings[s]
            params = _get(self.cell(s, "explicit", "params")) or _get(
                self.cell(s, "random", "params")
            )
            n_in = _get(self.cell(s, "explicit", "n_inputs")) or _get(
                self.cell(s, "random", "n_inputs")
            )
            cells = [self.ppl(s, k) for k in ("explicit", "warm", "random")]
            rows.append(
                [
                    tex_escape(s) + (" (main)" if s == self.main else ""),
                    st["agg"], str(st["block"]), str(st["radius"]), fmt_num(n_in, 0),
                    fmt_num(None if params is None else params / 1e6, 2),
                    *[fmt_pm(_get(c), _get(c, "std"), 1) for c in cells],
                ]
            )  # fmt: skip
        return rows

    # -- macros

    def numbers(self) -> dict[str, str]:
        p, s = self.params, self.main
        out: dict[str, str] = {
            "SaffuTopTypes": fmt_num(p["top_types"], 0),
            "SaffuSteps": fmt_num(p["steps"], 0),
            "SaffuBatch": fmt_num(p["batch_size"], 0),
            "SaffuLR": f"{p['lr']:g}",
            "SaffuWeightDecay": f"{p['weight_decay']:g}",
            "SaffuInitStd": f"{p['init_std']:g}",
            "SaffuAlphas": ", ".join(f"{a:g}" for a in p["alphas"]),
            "SaffuNumSeeds": str(len(p["seeds"])),
            "SaffuNumSettings": str(len(self.settings)),
            "SaffuMainSetting": self.describe(s),
        }
        ex = lambda metric: _get(self.cell(s, "explicit", metric))  # noqa: E731
        rnd = lambda metric: _get(self.cell(s, "random", metric))  # noqa: E731
        vocab_cell = self.cell(s, "explicit", "params") or self.cell(s, "random", "params")
        n_in = ex("n_inputs") or rnd("n_inputs")
        out["SaffuVocab"] = fmt_num(
            None if vocab_cell is None or not n_in else vocab_cell["mean"] / n_in, 0
        )
        out["SaffuInputs"] = fmt_num(n_in, 0)
        out["SaffuParams"] = fmt_num(None if vocab_cell is None else vocab_cell["mean"] / 1e6, 2)
        other = ex("other_share") if ex("other_share") is not None else rnd("other_share")
        out["SaffuOtherShare"] = fmt_num(None if other is None else 100 * other, 1)
        for name, kind in (("Explicit", "explicit"), ("Warm", "warm"), ("Cold", "random")):
            c = self.ppl(s, kind)
            out[f"Saffu{name}PPL"] = fmt_num(_get(c), 1)
            out[f"Saffu{name}PPLPM"] = fmt_pm(_get(c), _get(c, "std"), 1)
        out["SaffuWarmStepZeroVal"] = fmt_num(ex("init_val_loss"), 3)
        out["SaffuColdStepZeroVal"] = fmt_num(rnd("init_val_loss"), 3)
        out["SaffuWarmFinalVal"] = fmt_num(ex("val_loss"), 3)
        out["SaffuColdFinalVal"] = fmt_num(rnd("val_loss"), 3)
        out["SaffuCoocTime"] = fmt_num(ex("cooccurrence_time_s"), 2)
        out["SaffuSolveTime"] = fmt_num(ex("solve_time_s"), 2)
        out["SaffuWarmTrainTime"] = fmt_num(ex("train_time_s"), 1)
        out["SaffuColdTrainTime"] = fmt_num(rnd("train_time_s"), 1)
        out["SaffuAlpha"] = fmt_num(ex("alpha"), 2) if ex("alpha") is not None else MISSING
        # Across settings: where does the warm start end below the cold start (seed means)?
        warm_better, compared = 0, 0
        for st in self.settings:
            w, c = _get(self.ppl(st, "warm")), _get(self.ppl(st, "random"))
            if w is not None and c is not None:
                compared += 1
                warm_better += int(w < c)
        out["SaffuWarmBetterCount"] = str(warm_better)
        out["SaffuComparedSettings"] = str(compared)
        best = [
            (v, st)
            for st in self.settings
            if (v := _get(self.ppl(st, "warm"))) is not None and math.isfinite(v)
        ]
        if best:
            v, st = min(best)
            out["SaffuBestSetting"], out["SaffuBestWarmPPL"] = self.describe(st), fmt_num(v, 1)
        else:
            out["SaffuBestSetting"] = out["SaffuBestWarmPPL"] = MISSING
        for name, variant in (("Baseline", "baseline"), ("PilPure", "pil_pure")):
            ppl = self.lm.get((variant, "test_ppl"))
            solve = self.lm.get((variant, "solve_time_s"))
            out[f"Saffu{name}PPL"] = fmt_num(_get(ppl), 1)
            out[f"Saffu{name}SolveTime"] = fmt_num(_get(solve), 1)
        return out


SAFFU_TABLES = {  # name -> (label, column spec, header, caption head)
    "saffu": (
        "tab:saffu",
        "lp{0.27\\linewidth}rrrrrr",
        ["Model", "Optimises", "Trained (M)", "Solved (M)", "Solve (s)", "Grad. (s)",
         "PPL $\\downarrow$", "BPB $\\downarrow$"],
    ),
    "saffu_ablation": (
        "tab:saffu-ablation",
        "llrrrrrrr",
        ["Setting", "Agg.", "$b$", "$r$", "Inputs", "Params (M)", "Explicit", "Warm", "Cold"],
    ),
}  # fmt: skip


def captions(rep: SaffuReport, policy: str) -> dict[str, str]:
    main = rep.describe(rep.main)
    seeds = len(rep.params["seeds"])
    spread = "mean $\\pm$ sample std over seeds" if seeds > 1 else "one seed"
    return {
        "saffu": (
            "SAFFU explicit solution (our re-implementation) beside PIL's ridge solve and the GPT "
            f"baseline, test split ({tex_escape(policy)}). SAFFU rows: setting {main}, inputs the "
            f"{fmt_num(rep.params['top_types'], 0)} most frequent train types plus an ``other'' "
            "bucket, outputs the full vocabulary; warm and cold runs take the same "
            f"{fmt_num(rep.params['steps'], 0)} AdamW steps, batches and seeds. PPL: {spread}. "
            "Trained/solved: parameters set by gradient steps / by the closed form."
        ),
        "saffu_ablation": (
            "SAFFU aggregation and context ablation: test perplexity of the explicit solution "
            "alone, after AdamW from it (warm) and after AdamW from a random start (cold); "
            f"$b$: block size (uniform bag), $r$: radius (weights $1/k$); {spread}."
        ),
    }


def render_saffu_tables(
    summary_dir: str, lm_summary: str | None, params: dict, template_dir: str,
    tables_dir: str, numbers_path: str,
) -> None:  # fmt: skip
    """Write saffu.tex and saffu_ablation.tex into ``tables_dir`` and the Saffu* macros to
    ``numbers_path``, through the report contract."""
    d = Path(summary_dir)
    summary = pl.read_parquet(d / "saffu.parquet")
    lm = pl.read_parquet(lm_summary) if lm_summary and Path(lm_summary).is_file() else None
    rep = SaffuReport(summary, lm, params)
    policy = summary["data_policy"][0] if summary.height else MISSING
    caps = captions(rep, policy)
    rows = {"saffu": rep.main_rows(), "saffu_ablation": rep.ablation_rows()}
    tables = {
        Path(tables_dir) / f"{name}.tex": Table(caps[name], label, colspec, header, rows[name])
        for name, (label, colspec, header) in SAFFU_TABLES.items()
    }
    render_report(tables, rep.numbers(), template_dir, numbers_path,
                  "pillm.saffu_report from the SAFFU and LM summaries", prefix="Saffu")  # fmt: skip
