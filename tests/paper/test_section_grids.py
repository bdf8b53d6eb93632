"""The paper's prose types no grid and no other config fact: the values a selection searched,
the data sets and models a study runs, how many of them and how many tokens a model trained on
come from macros (or the config through them), and what the sections say about the
functional-gradient step grid containing zero agrees with the code (``pillm.lm.pil.step_grid``)
on every config.

In the style of the direction-word scan in ``test_claims.py``: a sentence that describes a
grid, a data set list or a model count by typed values goes stale the day the config changes,
as one did (the step grid was described as not containing zero while every config and the code
put 0 in it)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = sorted((ROOT / "paper" / "sections").glob("*.tex"))
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))

NUMBER = r"\$?-?(?:\d+(?:\.\d+)?|10\^\{?-?\d+\}?)\$?"
TYPED_GRID = [
    # a set literal of typed numbers in math: $\{0, 0.03, 0.1\}$ or $\eta\in\{10^{-6}, ...\}$
    re.compile(rf"(?:\\in|=|\$)\s*\\\{{\s*{NUMBER}\s*,\s*{NUMBER}"),
    # "grid of 0.03, 0.1", "grid (0.1, 0.3, 1)", "grid from 10^{-6} to 10^2"
    re.compile(rf"\bgrids?\s+(?:of|from|is|\()?\s*{NUMBER}\s*(?:,|to\b|--|\\dots)", re.I),
    # "the rates 3e-4, 1e-3 and 3e-3" after a grid word in the same clause
    re.compile(rf"\bgrid\b[^.;]{{0,40}}?{NUMBER}\s*,\s*{NUMBER}\s*(?:,|and)\s*{NUMBER}", re.I),
    # "a width sweep adds single projections of width $d$, $2d$ and $16d$"
    re.compile(r"\bsweep\b[^.;]{0,60}?\$\d*d\$\s*(?:,|and)\s*\$\d*d\$", re.I),
]
# Config facts other than grids, typed: a list of the data sets or models a study runs, a count
# of the models it runs, an amount of training tokens in words. The names are those the
# sections print; each list or count comes from a macro (\GenDatasets, \ProbeHubModels,
# \LoraNModels, \TrainTokens) that the config or the build fills.
DATASET = r"(?:MNIST|CIFAR-?10|WikiText-?2|PTB|Penn\s+Treebank|Tiny\s*Shakespeare|SST-2|LAMBADA)"
MODEL = r"(?:GPT-?2|Pythia[-\w]*|[Ll]la[Mm][Aa][-\w]*|(?:all-)?MiniLM[-\w]*|SmolLM2?[-\w]*)"
COUNT = r"(?:two|three|four|five|six|seven|eight|nine|ten|\d+)"
TYPED_FACTS = [
    # "(MNIST, CIFAR-10)", "MNIST and CIFAR-10", "WikiText-2/PTB"
    re.compile(rf"\b{DATASET}\s*(?:,|\band\b|/|\bor\b)\s*{DATASET}"),
    # "GPT-2, Pythia-160m and llama-160m"
    re.compile(rf"\b{MODEL}\s*(?:,|\band\b|/)\s*{MODEL}"),
    # "Two frozen models", "three pretrained base models"
    re.compile(
        rf"\b{COUNT}\s+(?:(?:frozen|pretrained|trained|base|hub|language)\s+)+models?\b", re.I
    ),
    # "a few hundred thousand tokens", "232k training tokens", "2 million tokens"
    re.compile(
        r"(?:\b(?:hundreds?|thousands?|millions?|billions?)|\d\s*[kKMB]\b)"
        r"\s+(?:of\s+)?(?:training\s+|train\s+)?tokens\b",
        re.I,
    ),
    # "Heads are $d/64$", "the FFN is $4d$ wide": the shape's config values
    re.compile(r"\$d\s*/\s*\d+\$|\$\d+\s*d\$\s+wide\b"),
    # "exceeds $10^{10}$": a solver threshold
    re.compile(r"\b(?:exceeds|above)\s+\$10\^\{\d+\}\$"),
]
# A width in units of d, typed: "$4d$", "$d\times 4d$", "$2{\times}4d$", "single-$8d$",
# "$p = 8d+1$". The FFN's width comes from model.ffn_mult (\FfnMult) and each feature map's from
# the code's maps (\FeatWidth<V>, \FeatDim<V>, \FeatProj<V>: pillm.lm.feature_maps), the scaling
# solve's from its measured feature count (\ScalCostFeatureDim).
TYPED_WIDTH = re.compile(r"(?<![\w\\])\d+d(?![A-Za-z])")
# What stays typed: a variant's id (\variant{refit\_single8d}, \variant{refit\_single\{1,2,16\}d})
# and a config key (\texttt{...}) name a config entry, so the text must spell them as the config
# does; the scan reads the prose without them.
IDENTIFIER = re.compile(r"\\(?:variant|texttt)\{(?:\\[{}]|[^{}])*\}")
# What a section says about zero in the functional-gradient step grid (its \eta).
ZERO = r"(?:zero|\$\\eta\s*=\s*0\$|\$0\$)"
SAYS_NO_ZERO = re.compile(
    rf"grid\b[^.]{{0,40}}?\b(?:does\s+not|doesn't|never)\s+(?:contain|include)s?\s+{ZERO}", re.I
)
SAYS_ZERO = re.compile(rf"grid\b[^.]{{0,40}}?\b(?<!not )(?:contains|includes)\s+{ZERO}", re.I)


def strip_comments(text: str) -> str:
    return re.sub(r"(?<!\\)%.*", "", text)


def typed_grids(text: str) -> list[str]:
    text = strip_comments(text)
    return [m.group(0) for pattern in TYPED_GRID for m in pattern.finditer(text)]


def typed_facts(text: str) -> list[str]:
    text = " ".join(strip_comments(text).split())
    return [m.group(0) for pattern in TYPED_FACTS for m in pattern.finditer(text)]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_sections_type_no_data_set_list_model_count_or_token_amount(section):
    assert typed_facts(section.read_text()) == [], (
        f"{section.relative_to(ROOT)} types a config fact (a data set or model list, a count of "
        "models, an amount of tokens); quote it through a macro the config fills (e.g. "
        "\\GenDatasets, \\ProbeHubModels, \\LoraNModels, \\TrainTokens)"
    )


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_sections_type_no_grid_values(section):
    assert typed_grids(section.read_text()) == [], (
        f"{section.relative_to(ROOT)} types a grid's values; quote them through a macro of the "
        "study's numbers file (e.g. \\LoraLambdaGrid), which the config fills"
    )


def typed_widths(text: str) -> list[str]:
    return TYPED_WIDTH.findall(IDENTIFIER.sub("", strip_comments(text)))


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_sections_type_no_width_in_units_of_d(section):
    assert typed_widths(section.read_text()) == [], (
        f"{section.relative_to(ROOT)} types a width in units of d; quote it through the macro "
        "the config or the code fills (\\FfnMult d, \\FeatWidthRefitSingle, \\FeatDimRefit)"
    )


@functools.cache
def step_grid_has_zero() -> frozenset[bool]:
    """Whether the functional-gradient step grid the code searches contains 0, per config."""
    from pillm.lm.pil import step_grid

    out = set()
    for path in CONFIGS:
        cfg = yaml.safe_load(path.read_text()) or {}
        steps = (cfg.get("pil") or {}).get("fgrad_steps")
        if steps is not None:
            out.add(0.0 in step_grid(steps))
    return frozenset(out)


@pytest.mark.parametrize("section", SECTIONS, ids=lambda p: p.stem)
def test_what_sections_say_about_zero_in_the_step_grid_is_true(section):
    has_zero = step_grid_has_zero()
    assert has_zero, "no config declares pil.fgrad_steps"
    text = " ".join(strip_comments(section.read_text()).split())
    wrong = SAYS_NO_ZERO if True in has_zero else SAYS_ZERO
    found = [m.group(0) for m in wrong.finditer(text)]
    assert not found, (
        f"{section.relative_to(ROOT)} says {found}, but pillm.lm.pil.step_grid over "
        f"pil.fgrad_steps of {[p.name for p in CONFIGS]} {'contains' if True in has_zero else 'lacks'} 0"
    )


def test_scan_catches_typed_grids_and_false_zero_statements():
    assert typed_grids("$\\eta$ from $\\{0, 0.03, 0.1\\}$") != []
    assert typed_grids("the step grid of 0.03, 0.1, 0.3 and 1") != []
    assert typed_grids("a grid from $10^{-6}$ to $10^{2}$") != []
    assert typed_grids("chosen among \\LoraLambdaGrid{} times the mean diagonal") == []
    assert typed_grids("split from $\\{\\SaffuAlphas\\}$; 4 layers, 256 wide") == []
    assert typed_grids("% a grid of 0.1, 0.3, 1 in a comment\n") == []
    assert typed_grids("\\variant{refit\\_single\\{1,2,16\\}d}") == []  # a name, not a grid
    assert typed_grids("A width sweep adds single projections\nof width $d$, $2d$ and $16d$.") != []
    assert typed_grids("$8d$ ($m=1$, $w=8d$).\n\\RefitWidthSweep{}") == []
    stale = "with a step from a grid that does not contain zero."
    assert SAYS_NO_ZERO.search(stale) and not SAYS_ZERO.search(stale)
    fixed = "from a grid that contains $\\eta=0$ (no step)"
    assert SAYS_ZERO.search(fixed) and not SAYS_NO_ZERO.search(fixed)
    assert step_grid_has_zero() == {True}  # the code adds the "no step" candidate


def test_scan_catches_typed_data_sets_model_counts_and_token_amounts():
    assert typed_facts("Images $x_1$ (MNIST, CIFAR-10) and noise") != []
    assert typed_facts("on the hub models GPT-2, Pythia-160m and llama-160m") != []
    assert typed_facts("Two frozen models supply the sentence vector") != []
    assert typed_facts("trained on a few hundred thousand tokens of text") != []
    assert typed_facts("trained on 232k training tokens") != []
    assert typed_facts("Images $x_1$ (\\GenDatasets) and noise") == []
    assert typed_facts("on MNIST \\ClaimGenMnistDiffFd. On CIFAR-10, \\ClaimGenCifarDiffFd") == []
    assert typed_facts("The \\LoraNModels{} frozen base models of \\texttt{lora.models}") == []
    assert typed_facts("trained on \\TrainTokens{} tokens of text") == []
    assert typed_facts("the profiles of two models may differ") == []  # not a count of a study's
    assert typed_facts("% (MNIST, CIFAR-10) in a comment\n") == []
    assert typed_facts("Heads are $d/64$, the FFN is $4d$ wide") != []
    assert typed_facts("When the condition number exceeds $10^{10}$ the solver") != []
    assert typed_facts("Heads are $d/\\ScalHeadDim$, the FFN is $\\ScalFfnMult d$ wide") == []
    assert typed_facts("exceeds $\\ProbeKappaMax$ (or Cholesky fails)") == []


def test_scan_catches_typed_widths_in_units_of_d():
    assert typed_widths("$W_1\\in\\R^{d\\times 4d}$") == ["4d"]
    assert typed_widths("by Bi-PIL ($2{\\times}4d$, \\variant{refit})") == ["4d"]
    assert typed_widths("single-\\texorpdfstring{$8d$}{8d}") == ["8d", "8d"]
    assert typed_widths("of features $p = 8d+1$; width $16d$") == ["8d", "16d"]
    assert typed_widths("$W_1\\in\\R^{d\\times \\FfnMult d}$, $w=\\FeatWidthRefit$") == []
    assert typed_widths("\\variant{refit\\_single8d}, \\variant{refit\\_single\\{1,2,16\\}d}") == []
    assert typed_widths("\\texttt{refit_single16d}; \\PPLRefitSingleEightD{}") == []
    assert typed_widths("% the FFN is 4d wide\n") == []
    assert typed_widths("$d=256$, $L=4$, 3D, $O(d^3)$") == []
