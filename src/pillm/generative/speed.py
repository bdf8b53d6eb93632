"""Time to equal quality: how long each method takes to reach the other's held-out error.

For each arm pair (same dataset, family and seed), from the runs' held-out MSE and fit time and
AdamW's held-out curve (training seconds so far, the clock stopped while evaluating):

- AdamW to PIL: the training time at the first evaluation whose held-out error is at or below
  the PIL fit's (resolution: ``generative.gradient.eval_every`` steps); not reached if none is.
- PIL to AdamW: the PIL fit has one point, so it reaches AdamW's final held-out error in its fit
  time if its error is at or below that, and never otherwise (it has no longer run).
- Flatness of AdamW's curve: the relative drop of the held-out error over the last quarter of
  its steps, (e(3/4) - e(end)) / e(end); near zero means the budget reached the flat part.

Torch-free (the aggregate rule runs it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def first_reach(curve: Iterable[tuple[float, float]], target: float) -> float | None:
    """Seconds of the first (seconds, error) point with error <= target, or None."""
    for seconds, err in sorted(curve):
        if err <= target:
            return seconds
    return None


def late_gain(curve: Iterable[tuple[int, float]]) -> float | None:
    """(e(3/4 of the steps) - e(end)) / e(end) over (step, error) points; None below 2 points.
    e(3/4) is the last point at or before three quarters of the final step."""
    pts = sorted(curve)
    if len(pts) < 2:
        return None
    last_step, last = pts[-1]
    before = [e for s, e in pts if s <= 0.75 * last_step] or [pts[0][1]]
    return (before[-1] - last) / last


def pair_speed(
    pil: Mapping[str, Any], adamw: Mapping[str, Any], curve: list[Mapping[str, Any]]
) -> dict[str, Any]:
    """One pair's row: ``pil``/``adamw`` are run rows (heldout_mse, fit_seconds), ``curve`` the
    AdamW run's held-out points ({x: step, seconds, y: error})."""
    timed = [(float(r["seconds"]), float(r["y"])) for r in curve]
    final = float(curve[-1]["y"]) if curve else float(adamw["heldout_mse"])
    to_pil = first_reach(timed, float(pil["heldout_mse"]))
    pil_reaches = float(pil["heldout_mse"]) <= final
    return {
        "pil_seconds": float(pil["fit_seconds"]),
        "adamw_seconds": float(adamw["fit_seconds"]),
        "pil_mse": float(pil["heldout_mse"]),
        "adamw_final_mse": final,
        "adamw_to_pil_seconds": to_pil,
        "adamw_reaches_pil": to_pil is not None,
        "pil_to_adamw_seconds": float(pil["fit_seconds"]) if pil_reaches else None,
        "pil_reaches_adamw": pil_reaches,
        "adamw_late_gain": late_gain((int(r["x"]), float(r["y"])) for r in curve),
    }


def speed_rows(runs: list[Mapping[str, Any]], curves: list[Mapping[str, Any]]) -> list[dict]:
    """One row per (dataset, family, seed) that has both arms. ``runs``: one dict per run with
    dataset, setting, seed, family, method, heldout_mse, fit_seconds; ``curves``: AdamW held-out
    curve points with dataset, setting, seed, x, seconds, y."""
    by_key = {(r["dataset"], r["family"], r["seed"], r["method"]): r for r in runs if r["family"]}
    points: dict[tuple, list] = {}
    for c in curves:
        points.setdefault((c["dataset"], c["setting"], c["seed"]), []).append(c)
    out = []
    for (ds, fam, seed, method), pil in sorted(by_key.items()):
        adamw = by_key.get((ds, fam, seed, "adamw"))
        if method != "pil" or adamw is None:
            continue
        curve = sorted(points.get((ds, adamw["setting"], seed), []), key=lambda c: c["x"])
        out.append({"dataset": ds, "family": fam, "seed": seed, **pair_speed(pil, adamw, curve)})
    return out
