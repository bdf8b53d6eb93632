"""LaTeX helpers shared by every report: the Jinja2 environment, escaping, number formats, the
missing-value mark, seed statistics and macro names. Study reports import these; none defines its
own."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
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
    """``text`` as LaTeX that prints it literally: every special character escaped, so a string
    from a result or the config (a generated sample, a model or device name) is text, never a
    command (``\\input{x}`` prints as typed)."""
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _TEX_ESCAPES[m.group()], str(text))


# Control sequences no generated file needs: they read or write files, run programs or
# redefine TeX. Generated text holding one was not escaped (tex_escape), so the build stops.
UNSAFE_COMMANDS = frozenset({
    "input", "include", "includeonly", "InputIfFileExists", "IfFileExists", "openin", "openout",
    "read", "readline", "write", "immediate", "special", "directlua", "latelua", "catcode",
    "csname", "def", "edef", "gdef", "xdef", "let", "futurelet", "usepackage", "RequirePackage",
    "documentclass", "makeatletter", "lstinputlisting", "verbatiminput", "pdfobj", "pdfliteral",
    "ShellEscape",
})  # fmt: skip
UNSAFE_ENVIRONMENTS = frozenset({"filecontents", "filecontents*"})


class UnsafeTex(ValueError):
    """Generated LaTeX holding a control sequence that could read or write files or run a
    program: a string reached it unescaped."""


def unsafe_tex(text: str) -> list[str]:
    """The control sequences of ``text`` (as TeX reads them: ``\\\\`` is one) that a generated
    file must not hold, and ``^^`` character codes (another way to write them)."""
    found = []
    for m in re.finditer(r"\\([A-Za-z@]+|.)", text, re.S):
        name = m.group(1)
        if name in UNSAFE_COMMANDS:
            found.append("\\" + name)
        elif name == "begin":
            env = re.match(r"\s*\{([^}]*)\}", text[m.end() :])
            if env and env.group(1) in UNSAFE_ENVIRONMENTS:
                found.append(f"\\begin{{{env.group(1)}}}")
    if "^^" in text:
        found.append("^^")
    return found


def check_tex(text: str, where: str | Path) -> str:
    """``text`` unchanged; UnsafeTex naming ``where`` and the sequences when ``unsafe_tex``
    finds any."""
    if bad := unsafe_tex(text):
        raise UnsafeTex(
            f"{where}: generated LaTeX holds {', '.join(sorted(set(bad)))}, which no generated "
            "file needs (it reads or writes files, runs programs or redefines TeX): a string "
            "from a result or the config reached it without pillm.paper.latex.tex_escape"
        )
    return text


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
    # a minus sign, not a hyphen; \ensuremath so the value reads the same inside $...$ (an
    # exponent macro) as in text, where "$-$" would close the surrounding math
    return "\\ensuremath{-}" + text[1:] if text.startswith("-") else text


def fmt_pm(mean: float, std: float | None, digits: int = 1) -> str:
    """'mean ± std'; std omitted when there is one seed (it is undefined). The sign is
    \\ensuremath'd, as fmt_num's minus: a macro of it reads the same in text and in math,
    whatever the number of seeds."""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return fmt_num(mean, digits)
    return f"{fmt_num(mean, digits)} \\ensuremath{{\\pm}} {fmt_num(std, digits)}"


MISSING = "--"  # the cell or macro value of a number this build did not measure


def finite(x: Any) -> bool:
    """True for a real, finite int or float (None, NaN, infinities and non-numbers are not)."""
    return isinstance(x, int | float) and math.isfinite(x)


def mean_std(xs: Iterable[Any]) -> tuple[float | None, float | None]:
    """Mean and sample std (ddof = 1) of the finite values; std is None below two values and
    both are None for none."""
    v = [float(x) for x in xs if finite(x)]
    if not v:
        return None, None
    m = sum(v) / len(v)
    s = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else None
    return m, s


def fmt_sci(x: float | None, digits: int = 1) -> str:
    """Scientific notation in math mode; '$\\infty$' for an infinite condition number."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if math.isinf(x):
        return "$\\infty$" if x > 0 else "$-\\infty$"
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    mant = x / 10**exp
    if round(abs(mant), digits) >= 10:
        mant, exp = mant / 10, exp + 1
    return f"${mant:.{digits}f}{{\\times}}10^{{{exp}}}$"


def fmt_sig(x: float | None, sig: int = 3) -> str:
    """``sig`` significant digits (for values spanning orders of magnitude, e.g. KID)."""
    if x is None or x != x:
        return MISSING
    if x == 0:
        return "0"
    digits = max(0, sig - 1 - math.floor(math.log10(abs(x))))
    return fmt_num(x, digits)


def fmt_range(lo: float | None, hi: float | None, digits: int) -> str:
    """'lo--hi', or one number where both format alike."""
    a, b = fmt_num(lo, digits), fmt_num(hi, digits)
    return a if a == b else f"{a}--{b}"


NUMBER_WORDS = ["Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine",
                "Ten", "Eleven", "Twelve", "Thirteen", "Fourteen", "Fifteen", "Sixteen"]  # fmt: skip


def macro_name(*parts: Any, prefix: str = "", whole_numbers: bool = False) -> str:
    """``prefix`` + the parts' words in CamelCase with numbers spelled out, since LaTeX macro
    names take letters only: ('mnist', 'flow_adamw8') -> 'MnistFlowAdamwEight'. Digits are
    spelled one by one ('gpt2' -> 'GptTwo', '125m' -> 'OneTwoFiveM') unless ``whole_numbers``
    ('refit_single16d' -> 'RefitSingleSixteenD'; IndexError past Sixteen: name it by hand)."""
    pattern = r"[A-Za-z]+|\d+" if whole_numbers else r"[A-Za-z]+|\d"
    words = [
        NUMBER_WORDS[int(tok)] if tok.isdigit() else tok[:1].upper() + tok[1:]
        for part in parts
        for tok in re.findall(pattern, str(part))
    ]
    return prefix + "".join(words)


def count_of(n: int, noun: str) -> str:
    """``n`` and the noun in its number: "1 seed", "3 seeds" (a regular plural)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
