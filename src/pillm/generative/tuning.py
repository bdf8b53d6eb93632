"""AdamW's learning rate for each arm pair, chosen on held-out images before the arms run.

Per (dataset, family) and rate of ``generative.gradient.lr_grid``, one job (``lr_run_job``)
trains the family's AdamW setting (pillm.generative.plan.FAMILIES) from the first seed for
``grid_fraction`` of its steps (same warm-up and cosine schedule, shortened), its held-out
regression error recorded every ``eval_every`` steps. The rates run as separate jobs so they
train side by side: the grid gates its family's seeds, so it is on the generative study's
longest chain. ``lr_pick_job`` then picks the rate with the lowest final held-out error and
records whether the pick lies on an edge of the grid (``pillm.core.selection.edge_side``, the rule by
which the other studies extend their grids; here the rates are separate jobs, so an edge pick
is counted in the paper instead of extended). The held-out images are the tail of the training
subset the PIL fits pick λ on (never test images), so both methods tune on the same data.
Writes ``lr.json`` (the pick, its edge and every rate's final error) and ``curves.parquet``
(each rate's held-out curve: the paper's figure of the grid).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pillm.core.records import write_json, write_rows_parquet
from pillm.core.selection import edge_side
from pillm.generative.config import GenerativeConfig
from pillm.generative.plan import lr_tag


def grid_steps(total: int, fraction: float) -> int:
    """Steps of one grid run: ``fraction`` of the arm's steps, at least one."""
    return max(1, math.ceil(total * fraction))


def pick_lr(final: dict[float, float]) -> float:
    """The rate with the lowest final held-out error (the smaller rate on a tie); a rate whose
    error is not finite (diverged) is never picked. ValueError when every rate diverged."""
    finite = {lr: e for lr, e in final.items() if math.isfinite(e)}
    if not finite:
        raise ValueError(
            f"every rate of generative.gradient.lr_grid diverged ({final}): add smaller rates"
        )
    return min(finite, key=lambda lr: (finite[lr], lr))


def lr_run_job(
    dataset: str, family: str, lr: float, cfg: dict, images: str, device: str, out: str
) -> None:
    """Train the family's AdamW setting at one grid rate (first seed, shortened) and write its
    final held-out error and held-out curve to ``out`` (json). ``cfg``: the generative section
    less datasets and classifier (as the generative job)."""
    # torch only here: the pick job below reads JSON, and a torch import is most of its time
    from pillm.core.runtime import resolve_device, tf32
    from pillm.generative.features import FeatureConfig
    from pillm.generative.fit import fit_setting, known_setting
    from pillm.generative.splits import fit_data

    gen = GenerativeConfig.from_dict(cfg, "generative")
    if lr not in gen.gradient.lr_grid:
        raise ValueError(f"rate {lr:g} is not in generative.gradient.lr_grid "
                         f"{gen.gradient.lr_grid}")  # fmt: skip
    device = resolve_device(device)
    setting = known_setting(cfg, dataset, f"{family}_adamw")
    feats = FeatureConfig(**setting.feature_options(cfg))
    x, x_val = fit_data(images, gen, device)
    seed = gen.seeds[0]
    total = gen.gradient.flow_steps if setting.model == "flow" else gen.gradient.diffusion_steps
    steps = grid_steps(total, gen.gradient.grid_fraction)
    with tf32(device.startswith("cuda")):
        _, _, curve = fit_setting(setting, gen, feats, x, x_val, device, seed, lr, steps)
    heldout = [r for r in curve if r["curve"] == "adamw_heldout"]
    write_json(Path(out), {
        "dataset": dataset, "family": family, "lr": lr, "seed": seed, "steps": steps,
        "of_steps": total, "final_heldout": heldout[-1]["y"], "curve": heldout,
    })  # fmt: skip


def lr_pick_job(runs: list[str], out_dir: str) -> None:
    """The grid's pick from its runs (``lr_run_job`` outputs of one dataset and family):
    ``lr.json`` and ``curves.parquet``."""
    recs = [json.loads(Path(r).read_text()) for r in runs]
    keys = ("dataset", "family", "seed", "steps", "of_steps")  # what the runs must share
    grid = {k: recs[0][k] for k in keys}
    for r in recs:
        if {k: r[k] for k in keys} != grid:
            raise ValueError(f"lr grid runs of different grids: {grid} vs "
                             f"{ {k: r[k] for k in keys} }")  # fmt: skip
    final = {r["lr"]: r["final_heldout"] for r in recs}
    out = Path(out_dir)
    rows = [{**row, "lr": r["lr"]} for r in recs for row in r["curve"]]
    write_rows_parquet(out / "curves.parquet", rows,
                       {k: grid[k] for k in ("dataset", "family", "seed")})  # fmt: skip
    lr = pick_lr(final)
    write_json(out / "lr.json", {
        **grid, "lr": lr, "edge": edge_side(list(final), lr, final),  # +1 top, -1 bottom, 0
        "final_heldout": {lr_tag(k): v for k, v in sorted(final.items())},
    })  # fmt: skip
