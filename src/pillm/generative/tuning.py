"""AdamW's learning rate for each arm pair, chosen on held-out images before the arms run.

One job per (dataset, family): the family's AdamW setting (pillm.plan.FAMILIES) trains from the
first seed at every rate of ``generative.gradient.lr_grid`` for ``grid_fraction`` of its steps
(same warm-up and cosine schedule, shortened), its held-out regression error recorded every
``eval_every`` steps; the rate with the lowest final held-out error is the pick. The held-out
images are the tail of the training subset the PIL fits pick λ on (never test images), so both
methods tune on the same data. Writes ``lr.json`` (the pick and every rate's final error) and
``curves.parquet`` (each rate's held-out curve: the paper's figure of the grid).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from pillm.core.records import write_json, write_rows_parquet
from pillm.core.runtime import resolve_device, tf32
from pillm.generative.flow import FeatureConfig
from pillm.generative.run import fit_data, fit_setting, known_setting
from pillm.settings import GenerativeConfig


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


def lr_grid_job(dataset: str, family: str, cfg: dict, images: str, device: str, out_dir: str):
    """Train the family's AdamW setting at each grid rate (first seed, shortened) and write the
    pick. ``cfg``: the generative section less datasets and classifier (as the generative job)."""
    gen = GenerativeConfig.from_dict(cfg, "generative")
    device = resolve_device(device)
    setting = known_setting(cfg, dataset, f"{family}_adamw")
    feats = FeatureConfig(**setting.feature_options(cfg))
    x, x_val = fit_data(images, gen)
    seed = gen.seeds[0]
    total = gen.gradient.flow_steps if setting.model == "flow" else gen.gradient.diffusion_steps
    steps = grid_steps(total, gen.gradient.grid_fraction)
    final, rows = {}, []
    for lr in gen.gradient.lr_grid:
        with tf32(device.startswith("cuda")):
            _, metrics, curve = fit_setting(setting, gen, feats, x, x_val, device, seed, lr, steps)
        heldout = [r for r in curve if r["curve"] == "adamw_heldout"]
        final[lr] = heldout[-1]["y"]
        rows += [{**r, "lr": lr} for r in heldout]
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    lr = pick_lr(final)
    out = Path(out_dir)
    ident = {"dataset": dataset, "family": family, "seed": seed}
    write_rows_parquet(out / "curves.parquet", rows, ident)
    write_json(out / "lr.json", {
        "dataset": dataset, "family": family, "lr": lr, "seed": seed, "steps": steps,
        "of_steps": total, "final_heldout": {f"{k:g}": v for k, v in final.items()},
    })  # fmt: skip
