"""LaTeX helpers shared by every report: the Jinja2 environment, escaping, number formats."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import jinja2

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
