"""Time to equal quality (pillm.generative.speed) on hand-made curves with known answers."""

from __future__ import annotations

import pytest

from pillm.generative.speed import first_reach, late_gain, pair_speed, speed_rows


def test_first_reach_is_the_first_point_at_or_under_the_target():
    curve = [(1.0, 0.9), (2.0, 0.6), (3.0, 0.5), (4.0, 0.4)]
    assert first_reach(curve, 0.5) == 3.0  # at the target counts
    assert first_reach(curve, 0.55) == 3.0
    assert first_reach(curve, 0.95) == 1.0
    assert first_reach(curve, 0.3) is None


def test_late_gain_compares_three_quarters_with_the_end():
    assert late_gain([(100, 1.0), (200, 0.6), (300, 0.5), (400, 0.4)]) == pytest.approx(0.25)
    assert late_gain([(100, 0.5), (200, 0.5)]) == 0.0  # flat
    assert late_gain([(100, 0.5)]) is None


def test_pair_speed_both_ways():
    curve = [{"x": 10, "seconds": 1.0, "y": 0.8}, {"x": 20, "seconds": 2.0, "y": 0.45},
             {"x": 30, "seconds": 3.0, "y": 0.3}, {"x": 40, "seconds": 4.0, "y": 0.29}]  # fmt: skip
    pil = {"heldout_mse": 0.5, "fit_seconds": 0.7}
    row = pair_speed(pil, {"heldout_mse": 0.29, "fit_seconds": 4.0}, curve)
    assert row["adamw_to_pil_seconds"] == 2.0 and row["adamw_reaches_pil"]
    assert row["pil_to_adamw_seconds"] is None and not row["pil_reaches_adamw"]
    # A PIL fit under AdamW's final error reaches it in its own fit time; AdamW never does.
    good = {"heldout_mse": 0.2, "fit_seconds": 0.7}
    row = pair_speed(good, {"heldout_mse": 0.29, "fit_seconds": 4.0}, curve)
    assert row["pil_to_adamw_seconds"] == 0.7 and row["adamw_to_pil_seconds"] is None


def test_speed_rows_pair_arms_by_dataset_family_and_seed():
    runs = []
    for seed in (0, 1):
        runs += [
            {"dataset": "mnist", "setting": "flow_pil", "seed": seed, "family": "flow",
             "method": "pil", "heldout_mse": 0.5, "fit_seconds": 1.0},
            {"dataset": "mnist", "setting": "flow_adamw", "seed": seed, "family": "flow",
             "method": "adamw", "heldout_mse": 0.4, "fit_seconds": 9.0},
        ]  # fmt: skip
    runs.append(
        {
            "dataset": "mnist",
            "setting": "flow_bipil",
            "seed": 0,
            "family": "",
            "method": "pil",
            "heldout_mse": 0.1,
            "fit_seconds": 1.0,
        }
    )  # an ablation: no pair
    curves = [
        {"dataset": "mnist", "setting": "flow_adamw", "seed": s, "x": x, "seconds": x / 10, "y": y}
        for s, pts in ((0, [(10, 0.6), (20, 0.4)]), (1, [(10, 0.45), (20, 0.4)]))
        for x, y in pts
    ]
    rows = speed_rows(runs, curves)
    assert [(r["seed"], r["adamw_to_pil_seconds"]) for r in rows] == [(0, 2.0), (1, 1.0)]
    assert all(r["family"] == "flow" and not r["pil_reaches_adamw"] for r in rows)
