"""The generative study's summaries: every job's records stacked into tidy parquet tables, and
the claim frame.

``aggregate_generative`` writes the ``SUMMARY_NAMES`` tables (``load`` reads them back for the
tables and figures) and ``summary/claims/generative.parquet``: the seed rows every direction
``paper/claims/generative.yaml`` states is tested on. Time to equal quality comes from speed.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from pillm.generative.speed import speed_rows
from pillm.paper.claim_frame import write_claim_frame
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet

# Claim-frame metrics: frame name -> summary column (time: see claim_rows). mse_pass1: held-out
# MSE after one pass over the PIL solve's pairs (the output-layer arm's first evaluation; the
# solve itself is one pass, so a PIL arm's is its held-out MSE).
CLAIM_METRICS = {
    "fd": "fd_self", "kid": "kid_self", "mse": "heldout_mse", "mse_pass1": "heldout_mse_pass1",
}  # fmt: skip
# Per seed of every gradient arm, 1 or 0: whether it trained (generative.convergence); the
# claims file lists those arms under ``opponents:`` (pillm.paper.claims).
TRAINED_METRIC = "trained"
SUMMARY_NAMES = (
    "generative", "generative_curves", "generative_samplers", "generative_classifiers",
    "generative_lr", "generative_lr_curves", "generative_speed",
)  # fmt: skip


def arm_name(dataset: str, method: str, family: str) -> str:
    """The claim frame's arm: ``<dataset>_<method>_<family>``, e.g. mnist_pil_flow."""
    return f"{dataset}_{method}_{family}"


def load(summary_dir: str | Path) -> dict[str, pl.DataFrame]:
    d = Path(summary_dir)
    return {n: pl.read_parquet(d / f"{n}.parquet") for n in SUMMARY_NAMES}


def aggregate_generative(
    metrics_paths: list[str],
    curve_paths: list[str],
    sampler_paths: list[str],
    classifier_paths: list[str],
    lr_paths: list[str],
    lr_curve_paths: list[str],
    out_dir: str,
    claims_path: str,
) -> None:
    """Generative jobs -> ``generative.parquet`` (one row per dataset x setting x seed, metrics as
    columns), ``generative_curves`` (λ, AdamW loss and held-out curves), ``generative_samplers``
    (quality per ODE solver and step count), ``generative_classifiers`` (feature CNN accuracy and
    the real-vs-real floor), ``generative_lr`` and ``generative_lr_curves`` (each grid's final
    errors, its pick and its held-out curves), ``generative_speed`` (time to equal quality per
    pair and seed) and the claim frame at ``claims_path``."""
    out = Path(out_dir)
    index = ["variant", "seed", "corpus", "model", "method", "ablation", "level", "family"]
    index += ["sampler", "data_policy", "device", "device_name", "git_rev"]
    runs = pivot_records(metrics_paths, index)
    runs = runs.rename({"variant": "setting", "corpus": "dataset"}).sort(
        "dataset", "setting", "seed"
    )
    write_parquet(runs, out / "generative.parquet")
    curves = concat_parquet(curve_paths).filter(pl.col("curve") != "none")
    write_parquet(curves, out / "generative_curves.parquet")
    samplers = concat_parquet(sampler_paths)
    write_parquet(samplers.sort("dataset", "setting", "seed", "sampler", "steps"),
                  out / "generative_samplers.parquet")  # fmt: skip
    cls = pivot_records(classifier_paths, ["corpus", "device", "device_name"])
    write_parquet(cls.rename({"corpus": "dataset"}).sort("dataset"),
                  out / "generative_classifiers.parquet")  # fmt: skip
    grids = []
    for path in lr_paths:
        pick = json.loads(Path(path).read_text())
        for lr, err in pick["final_heldout"].items():
            grids.append({"dataset": pick["dataset"], "family": pick["family"], "lr": float(lr),
                          "final_heldout": err, "picked": float(lr) == pick["lr"],
                          "edge": pick["edge"], "steps": pick["steps"],
                          "of_steps": pick["of_steps"]})  # fmt: skip
    write_parquet(
        pl.DataFrame(grids).sort("dataset", "family", "lr"), out / "generative_lr.parquet"
    )
    write_parquet(concat_parquet(lr_curve_paths), out / "generative_lr_curves.parquet")
    held = curves.filter(pl.col("curve") == "adamw_heldout")
    speed = speed_rows(runs.to_dicts(), held.to_dicts() if held.height else [])
    speed_df = pl.DataFrame(speed) if speed else pl.DataFrame({"dataset": [], "family": []})
    write_parquet(speed_df, out / "generative_speed.parquet")
    write_claim_frame(claims_path, seed_rows=claim_rows(runs))


def claim_rows(runs: pl.DataFrame) -> list[dict]:
    """Seed rows of every arm: fd, kid, mse and mse_pass1, and of each gradient arm whether it
    trained. Times are not claimed: the jobs' clocks share the GPU with other jobs
    (paper/claims/generative.yaml)."""
    rows = []
    for r in runs.filter(pl.col("ablation") == "main").iter_rows(named=True):
        arm = arm_name(r["dataset"], r["method"], r["family"])
        values = {m: r.get(col) for m, col in CLAIM_METRICS.items()}
        if r["method"] == "pil":
            values["mse_pass1"] = r["heldout_mse"]
        else:
            values[TRAINED_METRIC] = r.get(TRAINED_METRIC)
        for metric, value in values.items():
            if value is not None:
                rows.append({"arm": arm, "seed": r["seed"], "metric": metric, "value": value})
    return rows
