"""The command table's vocabulary: one :class:`Command` per ``python -m pillm <command>``.

Each study lists its own rows in ``<study>/commands.py`` (the data and paper layers in theirs);
``pillm.cli`` joins them into one parser. A row names the ``module:function`` it runs (imported
only when that command runs, so a report command never imports torch), its flags, and how the
parsed flags become the function's positional arguments. Flags map one-to-one onto arguments
except where a small named adapter says otherwise (a JSON section split into several arguments,
``--deps A=dir`` into a dict). ``pillm.codedeps`` reads the same rows to find the code a command
runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A positional argument of the entry function: a parsed flag's name, or an adapter of the parse.
Value = str | Callable[[argparse.Namespace], Any]


@dataclass(frozen=True)
class Arg:
    """One flag: its name and argparse's keyword options."""

    flag: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """One subcommand: ``target`` is ``package.module:function``, called with ``passes``.

    ``device`` adds ``--device`` and pins the job to one GPU before anything starts CUDA;
    ``threads`` adds ``--threads`` (torch CPU threads, 0: torch's default). ``user_errors`` are
    ``module:Exception`` names reported as one line and exit status 2 instead of a traceback.
    ``rule``: False for a command people run by hand, which no Snakemake rule runs.
    """

    name: str
    target: str
    help: str
    args: tuple[Arg, ...]
    passes: tuple[Value, ...]
    device: bool = False
    threads: bool = False
    user_errors: tuple[str, ...] = ()
    rule: bool = True

    @property
    def module(self) -> str:
        return self.target.split(":")[0]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--params is not valid JSON: {err}") from err


def req(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"required": True, "help": help})


def opt(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"help": help})


def many(flag: str, help: str | None = None) -> Arg:
    return Arg(flag, {"nargs": "+", "required": True, "help": help})


def js(flag: str = "--params", help: str | None = None) -> Arg:
    return Arg(flag, {"type": _json, "required": True, "help": help})


# ---- Adapters: flags that are not one argument each ----------------------------------------


def section(key: str, sub: str | None = None) -> Callable[[argparse.Namespace], Any]:
    """``--params``'s ``key`` entry (or its ``sub`` key): one JSON flag, several arguments."""

    def get(ns: argparse.Namespace) -> Any:
        return ns.params[key] if sub is None else ns.params[key][sub]

    get.__name__ = f"params[{key}]" + ("" if sub is None else f"[{sub}]")
    return get


def deps_map(ns: argparse.Namespace) -> dict[str, str]:
    """``--deps VARIANT=RUN_DIR ...`` as {variant: run dir}."""
    return dict(d.split("=", 1) for d in ns.deps)


SUMMARY = req("--summary-dir")
TEMPLATES = req("--templates")
NUMBERS = req("--numbers")
OUT_DIR = req("--out-dir")
PDF_PNG = (req("--pdf"), req("--png"))
OWN = (
    opt("--checkpoint", "pillm models: the baseline's model.pt"),
    opt("--tokenizer", "pillm models: the tokenizer.json it was trained with"),
)
