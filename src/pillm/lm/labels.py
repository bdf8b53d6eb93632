"""What the paper calls each LM variant: its label in tables, figures and claim sentences.

Kept out of the variant registry (``pillm.lm.variants``), which the LM runs' code stamps take
in: a label edit reruns no job. The refits' labels state their feature map's widths from the
shape table the model builds from (``pillm.lm.feature_maps.shape_tex``: ``d``, ``4d``,
``2{\\times}4d``), so a label cannot disagree with the map it names.
"""

from __future__ import annotations

from pillm.lm.feature_maps import REFITS, shape, shape_tex
from pillm.lm.variants import VARIANTS

_NAMED = {
    "baseline": "Baseline (AdamW)",
    "attn_only": "Attention only (AdamW)",
    "ffn_only": "FFN only (AdamW)",
    "pil_pure": "PIL pure (no gradient)",
    "attn_then_pil": "Attn$\\to$PIL (residual)",
    "attn_then_tp": "Attn$\\to$PIL (target prop.)",
    "pil_then_attn": "PIL$\\to$Attn",
    "frozen_ffn_attn": "Frozen random FFN + Attn",
    "pil_random_out_attn": "PIL$\\to$Attn, random $W_{\\mathrm{out}}$",
    "attn_only_matched": "Attention only, param.-matched",
    "linear_ffn": "Linear FFN (AdamW)",
    "attn_then_distill": "Attn$\\to$PIL (distill)",
    "attn_then_fgrad": "Attn$\\to$PIL (func. grad.)",
}


def _refit_label(variant: str) -> str:
    kind = "single" if shape(variant)[0] == 1 else "Bi-PIL"
    return f"Refit ({kind}, ${shape_tex(variant)}$)"


LABELS: dict[str, str] = {**_NAMED, **{v: _refit_label(v) for v in REFITS}}
if LABELS.keys() != VARIANTS.keys():  # a variant added to the registry needs its label here
    raise ImportError(f"pillm.lm.labels: labels and variants differ: "
                      f"{sorted(LABELS.keys() ^ VARIANTS.keys())} (add each to _NAMED)")  # fmt: skip
