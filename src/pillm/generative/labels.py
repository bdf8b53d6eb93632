"""What the generative tables and figures call things: datasets, arm families and methods as
printed, macro names, and the mean-over-seeds cell. Shared by tables.py, opponents.py and
figures.py."""

from __future__ import annotations

from pillm.paper.latex import MISSING, fmt_num, fmt_sig, macro_name
from pillm.paper.tidy import ci95

DATASETS = {"mnist": "MNIST", "cifar10": "CIFAR-10"}
DATASET_MACROS = {"cifar10": "CifarTen"}  # not "CifarOneZero"
FAMILY_NAMES = {  # arm family -> its row label
    "flow": "Flow matching",
    "diff": "Diffusion, shared $\\epsilon$ weights",
    "diff_bucketed": "Diffusion, $\\epsilon$ weights per bucket of $t$",
}
METHOD_NAMES = {  # pillm.generative.plan.METHODS -> its row label
    "pil": "PIL (ridge solve)",
    "adamw": "AdamW",
    "adamw_out": "AdamW, output layer",
}


def macro(*parts: str) -> str:
    """``Gen`` + parts in CamelCase, digits spelled out: ('mnist', 'flow_adamw') ->
    'GenMnistFlowAdamw'."""
    return macro_name(*(DATASET_MACROS.get(p, p) for p in parts), prefix="Gen")


def mean_ci(row: dict, col: str, digits: int | None = None) -> str:
    """'mean ± half-width of the 95 % t interval' (the mean alone from one seed)."""
    fmt = (lambda x: fmt_sig(x)) if digits is None else (lambda x: fmt_num(x, digits))  # noqa: E731
    mean = row.get(col)
    if mean is None:
        return MISSING
    half = ci95(row.get(f"{col}_std"), row["n_seeds"])
    return fmt(mean) if half is None else f"{fmt(mean)} $\\pm$ {fmt(half)}"
