"""The LM variant registry: how each variant is built, what it builds on and the config a run
of it depends on. Torch-free. What the paper calls each variant is ``pillm.lm.labels``: the LM
runs' code stamps take this module in, so a label kept here would rerun every LM job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ---- LM variants ---------------------------------------------------------------------------
# Each variant is one config entry and one target per seed. A variant that starts from another
# (``base``) or distils from one (``teacher``) uses that variant's run with the same seed.


@dataclass(frozen=True)
class Variant:
    use_attn: bool = True
    use_ffn: bool = True
    base: str | None = None  # start from this variant's trained model (same seed); None: fresh init
    teacher: str | None = None  # FFN teacher for the "distill" target (same seed)
    target: str | None = None  # PIL target: residual | tp | distill | fgrad; None: no solve
    features: str = "bi"  # PIL features: single (4d) | bi (2 x 4d) | single8d (8d)
    train_after_solve: bool = False  # gradient phase after the solve, solved FFNs frozen
    ffn_activation: str = "gelu"  # "linear": the FFN without activation (an affine map)
    freeze_ffn: bool = False  # FFNs stay at their random init (no solve, no gradient)
    # after the solve, each layer's W_out becomes a seeded Gaussian of the solved map's Frobenius
    # norm (lm/pil.py randomize_outputs): the solve's features and scale, not its fit
    random_out: bool = False
    match_params: str | None = None  # depth set in code so the parameter count matches this one

    @property
    def solves(self) -> bool:
        return self.target is not None

    @property
    def trains(self) -> bool:
        return not self.solves or self.train_after_solve


VARIANTS: dict[str, Variant] = {
    "baseline": Variant(),
    "attn_only": Variant(use_ffn=False),
    "ffn_only": Variant(use_attn=False),
    "pil_pure": Variant(use_ffn=False, target="tp"),
    "attn_then_pil": Variant(base="attn_only", target="residual"),
    "attn_then_tp": Variant(base="attn_only", target="tp"),
    "pil_then_attn": Variant(use_ffn=False, target="tp", train_after_solve=True),
    # Controls (issue #14): a frozen random-init FFN with no solve (for pil_then_attn),
    # attention-only matched in parameters to the baseline (more layers), a linear FFN.
    "frozen_ffn_attn": Variant(freeze_ffn=True),
    # pil_then_attn with its solved output maps replaced by random ones of the same norm: the same
    # random features (width, projections, seeds), so the pair isolates the solve
    "pil_random_out_attn": Variant(
        use_ffn=False,
        target="tp",
        train_after_solve=True,
        random_out=True,
    ),
    "attn_only_matched": Variant(use_ffn=False, match_params="baseline"),
    "linear_ffn": Variant(ffn_activation="linear"),
    "attn_then_distill": Variant(base="attn_only", teacher="baseline", target="distill"),
    "attn_then_fgrad": Variant(base="attn_only", target="fgrad"),
    "refit": Variant(base="baseline", teacher="baseline", target="distill"),
    "refit_single": Variant(
        base="baseline",
        teacher="baseline",
        target="distill",
        features="single",
    ),
    "refit_single8d": Variant(
        base="baseline",
        teacher="baseline",
        target="distill",
        features="single8d",
    ),
}
for _mult in (1, 2, 16):  # the feature-width sweep of the refit (single projection)
    VARIANTS[f"refit_single{_mult}d"] = Variant(
        base="baseline",
        teacher="baseline",
        target="distill",
        features=f"single{_mult}d",
    )


def dependencies(name: str) -> list[str]:
    """Variants whose same-seed runs this variant needs, in order (base, then teacher)."""
    v = VARIANTS[name]
    return [d for d in dict.fromkeys([v.base, v.teacher]) if d is not None]


def lm_params(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """Config one LM run depends on: the solve settings only for variants that solve."""
    cfg = {"model": config["model"], "train": config["train"]}
    if VARIANTS[variant].solves:
        cfg["pil"] = config["pil"]
    return cfg
