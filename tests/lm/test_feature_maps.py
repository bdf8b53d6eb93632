"""The widths the paper states come from the code and the config: the feature maps' shapes the
reports read (``pillm.lm.feature_maps``) are those the model builds (``models.feature_shapes``),
the FFN's share of a block's weights follows from ``model.ffn_mult`` as the model counts it, and
the macros, the scaling cost's measured feature count included, say so in units of d."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pillm.lm.feature_maps import (
    REFITS,
    feature_numbers,
    ffn_weight_share,
    shape,
    shape_tex,
    width_sweep,
    width_tex,
)
from pillm.lm.labels import LABELS
from pillm.lm.scaling_report import feature_dim
from pillm.lm.variants import VARIANTS
from pillm.models.feature_shapes import FEATURES

ROOT = Path(__file__).resolve().parents[2]
# the build configs (a ``name`` and a ``model``), not the schema or the resources file
CONFIGS = [p for p in sorted((ROOT / "config").glob("*.yaml"))
           if {"name", "model"} <= (yaml.safe_load(p.read_text()) or {}).keys()]  # fmt: skip


def test_every_variant_names_a_feature_map_the_model_builds():
    assert {v.features for v in VARIANTS.values()} <= FEATURES.keys()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_the_single_refit_has_the_trained_ffns_width(config):
    # the method section calls the single map "a projection of the trained FFN's width"
    model = yaml.safe_load(config.read_text())["model"]
    assert FEATURES[VARIANTS["refit_single"].features] == (1, model["ffn_mult"])


@pytest.mark.parametrize("ffn_mult", [1, 2, 4, 8])
def test_ffn_weight_share_is_the_models_share_of_its_weight_matrices(ffn_mult):
    from fractions import Fraction

    from pillm.models.gpt import Block, GPTConfig

    block = Block(GPTConfig(vocab_size=8, d_model=16, n_head=2, ffn_mult=ffn_mult))

    def matrices(module) -> int:
        return sum(p.numel() for p in module.parameters() if p.dim() == 2)

    ffn, attn = matrices(block.mlp), matrices(block.attn)
    words = {Fraction(1, 3): "one third", Fraction(1, 2): "half", Fraction(2, 3): "two thirds",
             Fraction(4, 5): "four fifths"}  # fmt: skip
    assert ffn_weight_share(ffn_mult) == words[Fraction(ffn, ffn + attn)]
    assert ffn_weight_share(7) == "78\\,\\%"  # 14/18: no word for it, a percent


def test_widths_read_as_the_paper_writes_them():
    assert [width_tex(m) for m in (1, 2, 16)] == ["d", "2d", "16d"]
    assert shape_tex("refit") == "2{\\times}4d" and shape_tex("refit_single8d") == "8d"
    assert list(width_sweep().values()) == [1, 2, 4, 8, 16]  # narrowest first
    assert "refit" not in width_sweep() and set(width_sweep()) < set(REFITS)


def test_feature_macros_follow_the_config_and_the_build():
    m = feature_numbers(4, ["baseline", "refit", "refit_single", "refit_single8d"])
    assert m["FfnMult"] == "4" and m["FfnWeightShare"] == "two thirds"
    assert (m["FeatProjRefit"], m["FeatWidthRefit"], m["FeatDimRefit"]) == ("2", "4d", "8d")
    assert m["FeatWidthRefitSingleOneD"] == "d" and m["FeatWidthRefitSingleSixteenD"] == "16d"
    assert m["RefitSweepRange"] == "$4d$ to $8d$"  # the single projections this build ran
    assert feature_numbers(2, ["refit_single16d", "refit_single1d"])["RefitSweepRange"] == (
        "$d$ to $16d$"
    )
    assert feature_numbers(2, ["baseline"])["RefitSweepRange"] == "--"
    assert feature_numbers(2, [])["FfnMult"] == "2"
    assert m["FeatSingleWidthPhrase"] == "of the trained FFN's width"
    assert feature_numbers(2, [])["FeatSingleWidthPhrase"] == (
        "of width $4d$ (the trained FFN's is $2d$)"
    )  # another model.ffn_mult: the text does not call the single map the FFN's width


def test_scaling_cost_feature_count_is_read_from_the_measured_rows():
    rows = [{"d_model": d, "features": 8 * d + 1} for d in (64, 128)]
    assert feature_dim(rows) == "8d"
    assert feature_dim([*rows, {"d_model": 32, "features": 4 * 32 + 1}]) == "--"


def test_labels_and_claim_names_state_the_widths_the_model_builds():
    # the refits' labels are made from the shape table; the claims' arm names are written by
    # hand in the claims file: each width either states must be the map's, typed as the text
    # types it (d, not 1d)
    def widths(text):
        return [(int(m or 1), int(w or 1)) for m, w in
                re.findall(r"\$(?:(\d+)\{\\times\})?(\d*)d\$", text)]  # fmt: skip

    names = yaml.safe_load((ROOT / "paper/claims/lm.yaml").read_text())["names"]
    for v in REFITS:
        assert widths(LABELS[v]) == [shape(v)], (v, LABELS[v])
        if v in names:
            assert widths(names[v]) in ([], [shape(v)]), (v, names[v])
        assert "$1d$" not in LABELS[v] + names.get(v, ""), v
    assert widths("Refit (Bi-PIL, $2{\\times}4d$)") == [(2, 4)]
    assert LABELS["refit_single1d"] == "Refit (single, $d$)"


def test_every_variant_has_a_label_outside_the_runs_code():
    """Labels live in pillm.lm.labels, not in the registry the LM runs' code stamps take in."""
    assert LABELS.keys() == VARIANTS.keys()
    assert not hasattr(next(iter(VARIANTS.values())), "label")
