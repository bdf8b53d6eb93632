"""Macros the sections use inside math mode must expand to math-safe text: a value holding "$"
closes the surrounding math and stops pdflatex ("Missing } inserted"), as a negative exponent
formatted "$-$0.3" once did in $d^{\\ScalCostAdamwExponent}$. Here the scan of the sections;
``tests/workflow/test_workflow.py`` checks the built macros' values against it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = sorted((ROOT / "paper" / "sections").glob("*.tex"))
NEWCOMMAND = re.compile(r"\\newcommand\{\\([A-Za-z]+)\}\{")


def math_macros(text: str) -> set[str]:
    """Names of the commands used inside inline math ($...$) of LaTeX ``text``."""
    text = re.sub(r"(?<!\\)%.*", "", text).replace(r"\$", "")
    return {name for math in text.split("$")[1::2] for name in re.findall(r"\\([A-Za-z]+)", math)}


def macro_values(text: str) -> dict[str, str]:
    """Each ``\\newcommand{\\Name}{value}`` of a generated numbers file (braces balanced)."""
    out = {}
    for m in NEWCOMMAND.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0) if text[i - 1] != "\\" else 0
            i += 1
        out[m[1]] = text[m.end() : i - 1]
    return out


def math_unsafe(sections: list[Path], numbers: list[Path]) -> dict[str, str]:
    """The macros used in math whose built value holds an unescaped "$"."""
    used = set().union(*(math_macros(p.read_text()) for p in sections))
    values = {k: v for p in numbers for k, v in macro_values(p.read_text()).items()}
    return {k: values[k] for k in sorted(used & values.keys())
            if re.search(r"(?<!\\)\$", values[k])}  # fmt: skip


def test_the_scan_finds_macros_in_math_and_their_values():
    text = r"grows as $d^{\Exp}$ and \Word{} costs \$5 % $\Comment$" + "\n" + r"$x=\Other$"
    assert math_macros(text) == {"Exp", "Other"}
    numbers = r"\newcommand{\Exp}{$-$0.3}" + "\n" + r"\newcommand{\Other}{\ensuremath{-}1{,}2}"
    assert macro_values(numbers) == {"Exp": "$-$0.3", "Other": r"\ensuremath{-}1{,}2"}
    assert "ScalCostAdamwExponent" in set().union(*(math_macros(p.read_text()) for p in SECTIONS))


def test_math_unsafe_names_a_dollar_valued_macro(tmp_path):
    section, numbers = tmp_path / "s.tex", tmp_path / "n.tex"
    section.write_text(r"as $d^{\Exp}$, with $\Fine$ and \Text")
    numbers.write_text("\n".join([r"\newcommand{\Exp}{$-$0.3}", r"\newcommand{\Fine}{1.5}",
                                  r"\newcommand{\Text}{$-$2}"]))  # fmt: skip
    assert math_unsafe([section], [numbers]) == {"Exp": "$-$0.3"}
