"""The appendix tables of the LM study's layer solves: per variant that solves and per layer, the
chosen ridge λ, the solve's held-out fit and the installed output map's Frobenius norm, from the
runs' solve records (``summary/solves.parquet``, written by ``pillm.lm.run``).

One row per (variant, layer); values over seeds: the chosen relative λ as its range, held-out MSE,
R² and ‖W_out‖_F as mean ± the half-width of the 95 % t interval (the mean alone with one seed).
"""

from __future__ import annotations

import math

import polars as pl

from pillm.lm.comparisons import FEATURE_VARIANTS, WIDTH_SWEEP, mean_ci
from pillm.lm.labels import LABELS
from pillm.lm.variants import VARIANTS
from pillm.paper.latex import MISSING, fmt_pm
from pillm.paper.table import LongTable, Table

REFITS = {*FEATURE_VARIANTS, *WIDTH_SWEEP}  # the second table's variants

SOLVE_COLUMNS = ("heldout_r2", "w_out_fro")  # what runs record beyond the λ sweep (pillm.lm.run)


def fmt_lambda(x: float) -> str:
    """A relative λ in LaTeX: 0, $10^{-4}$, $3{\\times}10^{-4}$."""
    if x == 0:
        return "0"
    exp = math.floor(math.log10(x) + 1e-9)
    mant = x / 10**exp
    mant_text = f"{mant:.2g}"
    return f"$10^{{{exp}}}$" if mant_text == "1" else f"${mant_text}{{\\times}}10^{{{exp}}}$"


def lambda_cell(values: list[float]) -> str:
    """The chosen λ over seeds: one value, or the range 'lo--hi' where seeds differ."""
    lo, hi = min(values), max(values)
    return fmt_lambda(lo) if lo == hi else f"{fmt_lambda(lo)}--{fmt_lambda(hi)}"


def sci_pm_cell(values: list[float]) -> str:
    """Mean ± 95 % half-width in one power of ten, two significant digits: $(4.1 \\pm
    0.3){\\times}10^{-4}$ (the mean alone with one value); 0 for an exact zero."""
    mean, half = mean_ci(values)
    if mean is None or not math.isfinite(mean):
        return MISSING
    if mean == 0 and not half:
        return "0"
    exp = math.floor(math.log10(abs(mean) or abs(half)))
    scale = 10.0**exp
    body = (
        f"{mean / scale:.1f}" if half is None else f"({mean / scale:.1f} \\pm {half / scale:.1f})"
    )
    return f"${body}{{\\times}}10^{{{exp}}}$"


def pm_cell(values: list[float], digits: int) -> str:
    """Mean ± 95 % half-width of the finite values; '--' where none is finite (R² of a zero
    target)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return MISSING
    mean, half = mean_ci(finite)
    return fmt_pm(mean, half, digits)


def tabled_variants(variants: list[str]) -> list[str]:
    """The variants whose solves the tables show: those that solve, less those whose output maps
    are replaced after the solve (their solve is another variant's, same seeds)."""
    return [v for v in variants if VARIANTS[v].solves and not VARIANTS[v].random_out]


def solve_rows(solves: pl.DataFrame, variants: list[str]) -> list[list[str] | str]:
    """One row per (variant, layer) of ``variants``, the variant named on its first layer;
    blocks of variants separated by a rule. Builds whose solve records predate the held-out R²
    and norm columns give no rows."""
    if solves.is_empty() or any(c not in solves.columns for c in SOLVE_COLUMNS):
        return []
    chosen = solves.filter(pl.col("chosen"))
    rows: list[list[str] | str] = []
    for v in variants:
        mine = chosen.filter(pl.col("variant") == v)
        if mine.is_empty():
            continue
        if rows:
            rows.append("midrule")
        for i, layer in enumerate(mine["layer"].unique().sort().to_list()):
            at = mine.filter(pl.col("layer") == layer)
            rows.append(
                [
                    LABELS[v] if i == 0 else "",
                    str(int(layer)),
                    lambda_cell(at["lambda_rel"].to_list()),
                    sci_pm_cell(at["val_mse"].to_list()),
                    pm_cell(at["heldout_r2"].to_list(), 3),
                    pm_cell(at["w_out_fro"].to_list(), 2),
                ]
            )
    return rows


HEADER = [
    "Variant",
    "Layer",
    "$\\lambda/\\bar{h}$",
    "Held-out MSE",
    "Held-out $R^2$",
    "$\\lVert W_{\\mathrm{out}}\\rVert_F$",
]
CAPTION = (
    "Per variant that solves and per layer (bottom-up: the stream entering a layer holds the "
    "solved layers below it); {seeds}. $\\lambda/\\bar{{h}}$: the ridge $\\lambda$ chosen on the "
    "held-out split, relative to the mean diagonal of $H^\\top H$ (a range where seeds chose "
    "differently). Held-out MSE and $R^2$: the solved map against its layer target ($R^2$ around "
    "the held-out target's mean; --: the target is 0, there is nothing to explain and the solved "
    "map is exactly 0). $\\lVert W_{{\\mathrm{{out}}}}\\rVert_F$: the map installed in the model "
    "(after the functional-gradient step where there is one). {control}"
)


def solve_tables(solves: pl.DataFrame, variants: list[str], seeds: str) -> LongTable:
    """The appendix's two solve tables (``tab:lm-solves``: training strategies and layer targets;
    ``tab:lm-solves-refit``: the refits of the baseline's FFNs), each where it has rows."""
    tabled = tabled_variants(variants)
    control = ""
    if "pil_random_out_attn" in variants:
        control = (f"{LABELS['pil_random_out_attn']} is left out: it solves as "
                   f"{LABELS['pil_then_attn']} does, then replaces each map by a random "
                   "one of the same norm.")  # fmt: skip
    parts = {
        "tab:lm-solves": ("training strategies and layer targets", [v for v in tabled
                                                                    if v not in REFITS]),
        "tab:lm-solves-refit": ("refits of the trained baseline's FFNs", [v for v in tabled
                                                                          if v in REFITS]),
    }  # fmt: skip
    tables = []
    for label, (what, group) in parts.items():
        if rows := solve_rows(solves, group):
            caption = f"Layer solves of the {what}. " + CAPTION.format(seeds=seeds, control=control)
            tables.append(Table(caption, label, "llrrrr", HEADER, rows, "tbp", "small", "4pt"))
    return LongTable(tables, "pillm.lm.report from results/<name>/summary/solves.parquet",
                     "% No variant of this build solves an FFN.")  # fmt: skip
