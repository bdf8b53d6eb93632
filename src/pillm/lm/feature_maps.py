"""The PIL feature maps' shapes in units of the model width d, and the paper's words for them.
Torch-free.

The shapes are ``pillm.models.feature_shapes.FEATURES``, the table the model builds from; this
module holds only the reports' wording of them, so the LM runs' code stamps do not take it in.
"""

from __future__ import annotations

from fractions import Fraction

from pillm.lm.variants import VARIANTS
from pillm.models.feature_shapes import FEATURES
from pillm.paper.latex import MISSING, macro_name

# The refits: random features fitted to the trained baseline's FFNs, one variant per map.
REFITS = [v for v, spec in VARIANTS.items() if spec.base == "baseline" and spec.target == "distill"]


def width_tex(mult: int) -> str:
    """A width in units of d as the paper writes it in math: 1 -> d, 4 -> 4d."""
    return "d" if mult == 1 else f"{mult}d"


def shape(variant: str) -> tuple[int, int]:
    """(projections, width per projection in units of d) of a solving variant's feature map."""
    return FEATURES[VARIANTS[variant].features]


def shape_tex(variant: str) -> str:
    """A feature map's widths in math: ``4d`` for one projection, ``2{\\times}4d`` for two."""
    m, w = shape(variant)
    return width_tex(w) if m == 1 else f"{m}{{\\times}}{width_tex(w)}"


def width_sweep() -> dict[str, int]:
    """The single-projection refits, narrowest first: variant -> feature width in units of d."""
    single = {v: shape(v)[1] for v in REFITS if shape(v)[0] == 1}
    return dict(sorted(single.items(), key=lambda item: item[1]))


# Fraction -> its words, for the share of a block's weight matrices in its FFN
FRACTION_WORDS = {Fraction(1, 3): "one third", Fraction(1, 2): "half",
                  Fraction(3, 5): "three fifths", Fraction(2, 3): "two thirds",
                  Fraction(5, 7): "five sevenths", Fraction(3, 4): "three quarters",
                  Fraction(4, 5): "four fifths"}  # fmt: skip


def ffn_weight_share(ffn_mult: int) -> str:
    """The FFN's share of a block's weight matrices, in words: its two d x (ffn_mult d) maps
    against attention's four d x d (query, key, value, output); biases and norms left out, so
    the prose says "about"."""
    share = Fraction(2 * ffn_mult, 2 * ffn_mult + 4)
    return FRACTION_WORDS.get(share, f"{float(share):.0%}".replace("%", "\\,\\%"))


def feature_numbers(ffn_mult: int, ran: list[str]) -> dict[str, str]:
    """Macros of the FFN's and the feature maps' widths: ``FfnMult`` (model.ffn_mult), the FFN's
    share of a block's weights, and per refit variant its projections ``FeatProj<V>``, width per
    projection ``FeatWidth<V>`` and feature count ``FeatDim<V>`` (math, in units of d); with
    ``RefitSweepRange``, the widths of the single-projection refits this build ``ran``."""
    out = {"FfnMult": str(ffn_mult), "FfnWeightShare": ffn_weight_share(ffn_mult)}
    for v in REFITS:
        m, w = shape(v)
        name = macro_name(v, whole_numbers=True)  # as the variant's PPL<V> macros
        out |= {f"FeatProj{name}": str(m), f"FeatWidth{name}": width_tex(w),
                f"FeatDim{name}": width_tex(m * w)}  # fmt: skip
    widths = [w for v, w in width_sweep().items() if v in ran]
    # the single map is "of the trained FFN's width" only where model.ffn_mult makes it so
    single = FEATURES["single"][1]
    out["FeatSingleWidthPhrase"] = (
        "of the trained FFN's width" if single == ffn_mult
        else f"of width ${width_tex(single)}$ (the trained FFN's is ${width_tex(ffn_mult)}$)"
    )  # fmt: skip
    out["RefitSweepRange"] = (
        MISSING if not widths
        else f"${width_tex(widths[0])}$" if len(widths) == 1
        else f"${width_tex(widths[0])}$ to ${width_tex(widths[-1])}$"
    )  # fmt: skip
    return out
