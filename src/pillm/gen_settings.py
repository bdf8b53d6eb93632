"""Which generative fits a config asks for: one *setting* per fitted model, named for the DAG.

A setting is PIL flow matching or PIL diffusion (closed-form output layer) or the same network
trained by AdamW at a budget counted in training pairs (a multiple of what the PIL solve
streams), plus the ablations of ``generative.ablations`` on ``generative.ablation_datasets``.
No torch import: the Snakefile plans the DAG from this module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One fit of one generative model; ``ablation``/``level`` say what it varies."""

    name: str
    model: str  # "flow" | "diffusion"
    method: str  # "pil" | "adamw"
    ablation: str  # "main", "budget", "width", "projections", "time_encoding", "buckets"
    level: str
    features: dict  # overrides of generative.features
    n_buckets: int | None = None  # diffusion PIL: ε weight sets over t
    budget: float | None = None  # AdamW: training pairs, as a multiple of the PIL solve's

    def feature_config(self, cfg: dict):
        from .flow import FeatureConfig  # torch: not needed to plan the DAG

        return FeatureConfig(**{**cfg["features"], **self.features})


def settings(cfg: dict, dataset: str) -> dict[str, Setting]:
    """Every setting the config asks for on ``dataset`` (the ``generative`` section)."""
    f, d = cfg["features"], cfg["diffusion"]
    out = [
        Setting("flow_pil", "flow", "pil", "main", "PIL", {}),
        Setting("diff_pil", "diffusion", "pil", "main", "PIL", {}, n_buckets=d["n_buckets"]),
    ]
    for b in cfg["gradient"]["budgets"]:
        tag = f"{b:g}".replace(".", "p")
        out.append(Setting(f"flow_adamw{tag}", "flow", "adamw", "budget", f"{b:g}x", {}, budget=b))
        out.append(
            Setting(f"diff_adamw{tag}", "diffusion", "adamw", "budget", f"{b:g}x", {}, budget=b)
        )
    if dataset in cfg["ablation_datasets"]:
        a = cfg["ablations"]
        for w in a["width"]:
            if w != f["width"]:
                out.append(Setting(f"flow_pil_w{w}", "flow", "pil", "width", str(w), {"width": w}))
        if a["bipil"]:
            # Bi-PIL: two random projections of half the width, so the feature count is equal.
            half = {"n_proj": 2, "width": f["width"] // 2}
            out.append(Setting("flow_bipil", "flow", "pil", "projections", "2", half))
        for enc in a["time_encoding"]:
            if enc != f["time_encoding"]:
                te = {"time_encoding": enc}
                out.append(Setting(f"flow_pil_{enc}", "flow", "pil", "time_encoding", enc, te))
        if a["shared_diffusion"] and d["n_buckets"] != 1:
            out.append(Setting("diff_pil_shared", "diffusion", "pil", "buckets", "1", {}, 1))
    return {s.name: s for s in out}


def all_settings(cfg: dict) -> dict[str, list[str]]:
    """dataset -> setting names (what the Snakefile expands)."""
    return {ds: list(settings(cfg, ds)) for ds in cfg["datasets"]}


def check_generative(cfg: dict) -> None:
    """Config errors that the schema cannot express, named by key (dataset names, activations
    and encodings are schema enums)."""
    if cfg["features"]["width"] < 2 and cfg["ablations"]["bipil"]:
        raise ValueError(
            "generative.features.width must be >= 2 for the Bi-PIL ablation "
            "(two projections of width/2); raise it or set generative.ablations.bipil: false"
        )
    d = cfg["diffusion"]
    if not d["beta_start"] <= d["beta_end"] < d["timesteps"] / 1000:
        raise ValueError(
            "generative.diffusion: need beta_start <= beta_end < timesteps/1000 (the betas are "
            f"scaled by 1000/timesteps); got {d['beta_start']}, {d['beta_end']}, {d['timesteps']}"
        )
    if d["n_buckets"] > d["timesteps"]:
        raise ValueError(
            f"generative.diffusion.n_buckets ({d['n_buckets']}) exceeds generative.diffusion."
            f"timesteps ({d['timesteps']}): each bucket needs at least one timestep"
        )
