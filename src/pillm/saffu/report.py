"""Rows of the SAFFU tables and the Saffu* macros (``SaffuReport``), from the SAFFU summaries
(pillm.saffu.aggregate) and the LM summary (``lm.parquet``) for the rows placed beside SAFFU:
the GPT baseline and PIL's ridge solve (``pil_pure``) when this build has them."""

from __future__ import annotations

from typing import Any

import polars as pl

from pillm.paper.latex import MISSING, fmt_num, fmt_pm, tex_escape
from pillm.saffu.aggregate import FULL, KN, train_fractions


def _get(cell: dict | None, key: str = "mean") -> float | None:
    return None if cell is None else cell.get(key)


def _pm(cell: dict | None, digits: int = 1, scale: float = 1.0) -> str:
    """Mean ± 95 % t half-width over seeds (the mean alone with one seed)."""
    if cell is None or cell.get("mean") is None:
        return MISSING
    half = cell.get("ci95")
    if not half:  # one seed, or a deterministic model (the same value at every seed)
        return fmt_num(cell["mean"] * scale, digits)
    return fmt_pm(cell["mean"] * scale, half * scale, digits)


def _pct(fraction: float) -> str:
    return fmt_num(100 * fraction, 0 if 100 * fraction == round(100 * fraction) else 1)


class SaffuReport:
    """Rows of the SAFFU tables and the Saffu* macros, from the SAFFU and LM summaries."""

    def __init__(self, summary: pl.DataFrame, lm: pl.DataFrame | None, params: dict):
        self.params = params
        self.main = params["main_setting"]
        self.fractions = train_fractions(params)
        self.cells: dict[tuple[str, str, float, str], dict[str, Any]] = {}
        self.settings: dict[str, dict[str, Any]] = {}
        for r in summary.iter_rows(named=True):
            self.cells[(r["variant"], r["init"], float(r["fraction"]), r["metric"])] = r
            if r["variant"] != KN:
                self.settings.setdefault(
                    r["variant"], {k: r[k] for k in ("agg", "block", "radius", "tokenizer")}
                )
        self.lm: dict[tuple[str, str], dict[str, Any]] = {}
        if lm is not None:
            for r in lm.iter_rows(named=True):
                self.lm[(r["variant"], r["metric"])] = r

    def cell(self, setting: str, init: str, metric: str, fraction: float = FULL) -> dict | None:
        return self.cells.get((setting, init, float(fraction), metric))

    def value(self, setting: str, init: str, metric: str, fraction: float = FULL) -> float | None:
        return _get(self.cell(setting, init, metric, fraction))

    def ppl(self, setting: str, kind: str, fraction: float = FULL) -> dict | None:
        """Test perplexity cell of one row kind: the explicit solution alone (the warm runs
        before AdamW), warm (explicit then AdamW), cold (log-unigram start then AdamW) or the
        Kneser-Ney baseline (``kn``, any setting)."""
        if kind == "kn":
            return self.cell(KN, "kn", "test_ppl", fraction)
        if kind == "explicit":
            return self.cell(setting, "explicit", "init_test_ppl", fraction)
        return self.cell(setting, "explicit" if kind == "warm" else "random", "test_ppl", fraction)

    def ordered_settings(self) -> list[str]:
        rest = sorted(s for s in self.settings if s != self.main)
        return ([self.main] if self.main in self.settings else []) + rest

    def describe(self, setting: str) -> str:
        s = self.settings.get(setting)
        if s is None:
            return MISSING
        return f"{s['agg']}, $b{{=}}{s['block']}$, $r{{=}}{s['radius']}$"

    def params_m(self, setting: str) -> float | None:
        p = self.value(setting, "explicit", "params") or self.value(setting, "random", "params")
        return None if p is None else p / 1e6

    # -- tables

    def main_rows(self) -> list[list[str]]:
        """GPT baseline and PIL ridge (from the LM summary), Kneser-Ney and the three SAFFU rows,
        all on the full train split."""
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
                    m("solve_time_s", digits=1), m("grad_time_s", digits=1), _pm(ppl, 1),
                    m("test_bpb", digits=3),
                ]
            )  # fmt: skip
        order = self.value(KN, "kn", "order")
        rows.append(
            [
                f"Kneser-Ney {fmt_num(order, 0)}-gram (interpolated)",
                "counts with modified discounts; order chosen on held-out data", "0", MISSING,
                fmt_num(self.value(KN, "kn", "fit_time_s"), 1), "0",
                _pm(self.ppl(self.main, "kn"), 1), fmt_num(self.value(KN, "kn", "test_bpb"), 3),
            ]
        )  # fmt: skip
        s = self.main
        p = fmt_num(self.params_m(s), 2)
        saffu_rows = [
            ("explicit", "SAFFU explicit solution", "softmax CE; stationary point from log "
             "co-occurrences (one pass)", "0", p),
            ("warm", "SAFFU explicit $\\to$ AdamW (warm)", "softmax CE; explicit start, then "
             "AdamW", p, p),
            ("random", "SAFFU log-unigram $\\to$ AdamW (cold)", "softmax CE; unigram start, then "
             "AdamW", p, "0"),
        ]  # fmt: skip
        for kind, label, objective, trained, solved in saffu_rows:
            init = "random" if kind == "random" else "explicit"
            solve = self.value(s, init, "solve_time_s")
            grad = None if kind == "explicit" else self.value(s, init, "train_time_s")
            bpb = self.value(s, init, "init_test_bpb" if kind == "explicit" else "test_bpb")
            rows.append(
                [
                    label, objective, trained, solved, fmt_num(solve, 1),
                    "0" if kind == "explicit" else fmt_num(grad, 1),
                    _pm(self.ppl(s, kind), 1), fmt_num(bpb, 3),
                ]
            )  # fmt: skip
        return rows

    def size_rows(self) -> list[list[str]]:
        """Per train fraction (main setting): tokens, the four models' test perplexity, the
        chosen smoothing mass and rates, and the best AdamW step of each start."""
        rows = []
        s = self.main
        for f in self.fractions:
            tokens = self.value(s, "explicit", "train_tokens", f) or self.value(
                s, "random", "train_tokens", f
            )
            rows.append(
                [
                    _pct(f), fmt_num(None if tokens is None else tokens / 1e3, 1),
                    *[_pm(self.ppl(s, k, f), 1) for k in ("kn", "explicit", "warm", "random")],
                    fmt_num(self.value(s, "explicit", "alpha", f), 3),
                    _g(self.value(s, "explicit", "lr", f)), _g(self.value(s, "random", "lr", f)),
                    fmt_num(self.value(s, "explicit", "best_step", f), 0),
                    fmt_num(self.value(s, "random", "best_step", f), 0),
                ]
            )  # fmt: skip
        return rows

    def ablation_rows(self) -> list[list[str]]:
        rows = []
        for s in self.ordered_settings():
            st = self.settings[s]
            n_in = self.value(s, "explicit", "n_inputs") or self.value(s, "random", "n_inputs")
            cells = [self.ppl(s, k) for k in ("explicit", "warm", "random")]
            n = _get(cells[1], "n") or _get(cells[2], "n")
            rows.append(
                [
                    tex_escape(s) + (" (main)" if s == self.main else ""),
                    st["agg"], str(st["block"]), str(st["radius"]), fmt_num(n_in, 0),
                    fmt_num(self.params_m(s), 2), *[_pm(c, 1) for c in cells],
                    fmt_num(n, 0),
                ]
            )  # fmt: skip
        return rows

    # -- macros

    def selection_numbers(self) -> dict[str, str]:
        """How the grids behaved, over the (setting, train fraction) cells that selected (a
        reused rate is no selection): in how many the configured grid's pick was on its edge
        (for at least one seed), the most points an extension added, in how many the final pick
        is still on an edge (the extension bound reached)."""
        out = {}
        for name, init, metric in (("Alpha", "explicit", "alpha"), ("WarmLR", "explicit", "lr"),
                                   ("ColdLR", "random", "lr")):  # fmt: skip
            cells = [
                [self.value(s, init, f"{metric}_{k}", f) for k in ("edge_hit", "extensions", "on_edge")]
                for s in self.settings for f in self.fractions
                if self.value(s, init, f"{metric}_edge_hit", f) is not None
                and not (metric == "lr" and self.value(s, init, "lr_reused", f))
            ]  # fmt: skip
            out[f"Saffu{name}Selections"] = str(len(cells))
            out[f"Saffu{name}EdgeHits"] = str(sum(c[0] > 0 for c in cells))
            out[f"Saffu{name}StillOnEdge"] = str(sum(c[2] > 0 for c in cells))
            out[f"Saffu{name}MaxExtensions"] = fmt_num(max((c[1] for c in cells), default=None), 0)
        return out

    def numbers(self) -> dict[str, str]:
        p, s = self.params, self.main
        out: dict[str, str] = {
            "SaffuTopTypes": fmt_num(p["top_types"], 0),
            "SaffuMaxSteps": fmt_num(p["max_steps"], 0),
            "SaffuPatience": str(p["patience"]),
            "SaffuEvalEvery": fmt_num(p["eval_every"], 0),
            "SaffuBatch": fmt_num(p["batch_size"], 0),
            "SaffuLRs": ", ".join(f"{x:g}" for x in p["lrs"]),
            "SaffuLRExtend": str(p.get("lr_extend", 1)),
            "SaffuWeightDecay": f"{p['weight_decay']:g}",
            "SaffuInitStd": f"{p['init_std']:g}",
            "SaffuAlphas": ", ".join(f"{a:g}" for a in p["alphas"]),
            "SaffuAlphaExtend": str(p.get("alpha_extend", 2)),
            "SaffuNumSeeds": str(len(p["seeds"])),
            "SaffuNumAblationSeeds": str(len(p["ablation_seeds"])),
            "SaffuFractions": ", ".join(f"{_pct(f)}\\,\\%" for f in self.fractions),
            "SaffuNumSettings": str(len(self.settings)),
            "SaffuMainSetting": self.describe(s),
            "SaffuKNOrders": ", ".join(str(k) for k in p["kn"]["orders"]),
            "SaffuKNOrderExtend": str(p["kn"].get("order_extend", 0)),
        }
        ex = lambda metric: self.value(s, "explicit", metric)  # noqa: E731
        rnd = lambda metric: self.value(s, "random", metric)  # noqa: E731
        params, n_in = self.params_m(s), ex("n_inputs") or rnd("n_inputs")
        out["SaffuVocab"] = fmt_num(None if params is None or not n_in else params * 1e6 / n_in, 0)
        out["SaffuInputs"] = fmt_num(n_in, 0)
        out["SaffuParams"] = fmt_num(params, 2)
        other = ex("other_share") if ex("other_share") is not None else rnd("other_share")
        out["SaffuOtherShare"] = fmt_num(None if other is None else 100 * other, 1)
        out["SaffuTrainTokens"] = fmt_num(ex("train_tokens") or rnd("train_tokens"), 0)
        for name, kind in (("Explicit", "explicit"), ("Warm", "warm"), ("Cold", "random"),
                           ("KN", "kn")):  # fmt: skip
            c = self.ppl(s, kind)
            out[f"Saffu{name}PPL"] = fmt_num(_get(c), 1)
            out[f"Saffu{name}PPLPM"] = _pm(c, 1)
        out["SaffuKNOrder"] = fmt_num(self.value(KN, "kn", "order"), 0)
        on_edge = self.value(KN, "kn", "order_on_edge")
        out["SaffuKNOrderEdge"] = (
            MISSING if on_edge is None else "on an edge of" if on_edge else "inside"
        )
        out["SaffuKNFitTime"] = fmt_num(self.value(KN, "kn", "fit_time_s"), 1)
        out["SaffuColdStartPPL"] = fmt_num(rnd("unigram_test_ppl"), 1)  # the unigram model
        out["SaffuWarmStepZeroVal"] = fmt_num(ex("init_val_loss"), 3)
        out["SaffuColdStepZeroVal"] = fmt_num(rnd("init_val_loss"), 3)
        out["SaffuWarmFinalVal"] = fmt_num(ex("val_loss"), 3)
        out["SaffuColdFinalVal"] = fmt_num(rnd("val_loss"), 3)
        out["SaffuWarmBestStep"] = fmt_num(ex("best_step"), 0)
        out["SaffuColdBestStep"] = fmt_num(rnd("best_step"), 0)
        out["SaffuWarmLR"], out["SaffuColdLR"] = _g(ex("lr")), _g(rnd("lr"))
        out["SaffuCoocTime"] = fmt_num(ex("cooccurrence_time_s"), 2)
        out["SaffuSolveTime"] = fmt_num(ex("solve_time_s"), 2)
        out["SaffuWarmTrainTime"] = fmt_num(ex("train_time_s"), 1)
        out["SaffuColdTrainTime"] = fmt_num(rnd("train_time_s"), 1)
        out["SaffuAlpha"] = _g(ex("alpha"))

        # runs (not cells): a 0/1 metric's mean over a cell's seeds times their number
        def cells(metric: str) -> list:
            return [
                c for st in self.settings for init in ("explicit", "random") for f in self.fractions
                if (c := self.cell(st, init, metric, f))
            ]  # fmt: skip

        for macro, metric in (("SaffuStepCapStops", "stopped_at_step_cap"),
                              ("SaffuStepCapHits", "hit_step_cap")):  # fmt: skip
            out[macro] = str(sum(round(c["mean"] * c["n"]) for c in cells(metric) if c["mean"]))
        out["SaffuTrainedRuns"] = str(sum(c["n"] for c in cells("stopped_at_step_cap")))
        # the cold starts' flags (pillm.saffu.aggregate.trained_rows): runs, and those whose
        # held-out loss fell by less than lm.trained_margin (claims against them not evaluated)
        flags = cells("trained")
        out["SaffuColdRuns"] = str(sum(c["n"] for c in flags))
        out["SaffuColdUntrained"] = str(sum(c["n"] - round(c["mean"] * c["n"]) for c in flags))
        out.update(self.selection_numbers())
        for name, variant in (("Baseline", "baseline"), ("PilPure", "pil_pure")):
            out[f"Saffu{name}PPL"] = fmt_num(_get(self.lm.get((variant, "test_ppl"))), 1)
            out[f"Saffu{name}SolveTime"] = fmt_num(_get(self.lm.get((variant, "solve_time_s"))), 1)
        return out


def _g(x: float | None) -> str:
    return MISSING if x is None else f"{x:g}"
