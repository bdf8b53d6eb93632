"""One generative setting fitted from one seed: a PIL solve (flow.py, diffusion.py), the same
network trained by AdamW at its grid's learning rate (train.py), or AdamW on the PIL net's output
layer alone over the solve's own features and pairs (adamw_out.py), with its metrics and curves,
and the held-out regression error every fit is scored on. Shared by the fit jobs (run.py) and
the learning-rate grid (tuning.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pillm.core.records import read_records
from pillm.core.runtime import sync, tf32
from pillm.generative.adamw_out import AdamwOutConfig, fit_adamw_out
from pillm.generative.config import GenerativeConfig
from pillm.generative.convergence import flattened, rel_gain, trained
from pillm.generative.diffusion import (
    DiffusionConfig,
    eps_heldout_mse,
    fit_pil_diffusion,
    train_gradient_diffusion,
)
from pillm.generative.features import FeatureConfig, trainable_params
from pillm.generative.flow import FlowConfig, fit_pil_flow, flow_heldout_mse, train_gradient_flow
from pillm.generative.plan import Setting, settings
from pillm.generative.train import TrainConfig


def adamw_steps(setting: Setting, gen: GenerativeConfig) -> int:
    """AdamW steps of an arm: generative.gradient.flow_steps or diffusion_steps."""
    g = gen.gradient
    return g.flow_steps if setting.model == "flow" else g.diffusion_steps


def diffusion_config(
    gen: GenerativeConfig, feats: FeatureConfig, n_buckets: int = 1
) -> DiffusionConfig:
    """The DDPM fit of ``gen.diffusion`` on ``feats`` with ``n_buckets`` ε weight sets."""
    d = gen.diffusion
    return DiffusionConfig(
        features=feats, timesteps=d.timesteps, beta_start=d.beta_start, beta_end=d.beta_end,
        n_buckets=n_buckets, pairs_per_image=d.pairs_per_image, chunk_size=gen.chunk_size,
        lambdas=gen.lambdas,
    )  # fmt: skip


def heldout_mse(setting: Setting, gen: GenerativeConfig, net, x_val, seed: int, device: str):
    """The held-out regression error every fit of ``setting`` is scored on (and AdamW's curve):
    velocity (flow) or ε (diffusion, t uniform over all T) on pairs from held-out images, the
    pairs drawn from ``seed``; always in float32 (TF32 off), whatever the training used."""
    with tf32(False):
        if setting.model == "flow":
            return flow_heldout_mse(
                net, x_val, seed, gen.flow.pairs_per_image, gen.chunk_size, device
            )
        sched = diffusion_config(gen, FeatureConfig()).schedule()
        return eps_heldout_mse(
            net, x_val, sched, seed, gen.diffusion.pairs_per_image, gen.chunk_size, device
        )


def adamw_out_config(gen: GenerativeConfig) -> AdamwOutConfig:
    """The output-layer arm's settings: generative.adamw_out, and the batch size, warm-up and
    convergence rules of generative.gradient (as the full-network arm)."""
    a, g = gen.adamw_out, gen.gradient
    return AdamwOutConfig(
        lr_grid=a.lr_grid, lr_extend=a.lr_extend, max_epochs=a.max_epochs,
        anneal_epochs=a.anneal_epochs,
        batch_size=g.batch_size, warmup=g.warmup, flat_evals=g.flat_evals, flat_tol=g.flat_tol,
        trained_drop=g.trained_drop,
    )  # fmt: skip


def convergence(first_loss: float, final_loss: float, heldout: list[float], g) -> dict:
    """A full-network AdamW run's record of whether it trained and whether its held-out curve
    had flattened at its end (generative.convergence; ``g``: generative.gradient)."""
    gain = rel_gain(heldout, g.flat_evals)
    return {
        "first_train_loss": first_loss,
        "trained": float(trained(first_loss, final_loss, g.trained_drop)),
        "flattened": float(flattened(heldout, g.flat_evals, g.flat_tol)),
        **({} if gain is None else {"heldout_rel_gain": gain}),
    }


def warm_up_solvers(device: str) -> None:
    """Initialise the float64 GEMM and the linear-algebra libraries PIL's timed fit uses (on CUDA
    their first call loads cuBLAS/cuSOLVER handles), as AdamW's clock starts after its first
    step: neither method's time includes the library's start-up."""
    if not device.startswith("cuda"):
        return
    a = torch.eye(64, dtype=torch.float64, device=device)
    torch.linalg.cholesky_ex(a @ a)
    torch.linalg.eigh(a)
    sync(device)


def fit_setting(
    setting: Setting, gen: GenerativeConfig, feats: FeatureConfig, x_fit, x_val, device: str,
    seed: int, lr: float | None = None, steps: int | None = None,
):  # fmt: skip
    """Fit one setting on ``feats`` (its random features) from ``seed``; AdamW at ``lr`` for
    ``steps`` (default: the arm's configured steps). Returns (model, metrics, curve rows)."""
    chunk = gen.chunk_size
    dcfg = diffusion_config(gen, feats, setting.n_buckets)
    fcfg = FlowConfig(feats, gen.flow.pairs_per_image, chunk, gen.lambdas)
    if setting.method == "pil":
        warm_up_solvers(device)
    if setting.method == "adamw_out":
        evaluate = lambda m: heldout_mse(setting, gen, m, x_val, seed, device)  # noqa: E731
        solve = fcfg if setting.model == "flow" else dcfg
        return fit_adamw_out(solve, adamw_out_config(gen), x_fit, seed, device, evaluate, lr)
    if setting.method == "pil" and setting.model == "flow":
        net, fit = fit_pil_flow(x_fit, fcfg, seed, device, x_val=x_val)
        fits = [fit]
    elif setting.method == "pil":
        net, fits = fit_pil_diffusion(x_fit, dcfg, seed, device, x_val=x_val)
    else:
        if lr is None:
            raise ValueError(f"setting {setting.name!r} trains by AdamW: it needs a learning rate")
        g = gen.gradient
        steps = steps or adamw_steps(setting, gen)
        tcfg = TrainConfig(
            steps=steps, batch_size=g.batch_size, lr=lr,
            warmup=max(1, min(g.warmup, steps // 10)), log_every=max(1, steps // 50),
        )  # fmt: skip
        evaluate = lambda m: heldout_mse(setting, gen, m, x_val, seed, device)  # noqa: E731
        if setting.model == "flow":
            net, rep = train_gradient_flow(x_fit, feats, tcfg, seed, device, evaluate, g.eval_every)
        else:
            net, rep = train_gradient_diffusion(
                x_fit, dcfg, tcfg, seed, device, evaluate, g.eval_every
            )
        metrics = {
            "fit_seconds": rep.seconds, "adamw_steps": steps, "adamw_lr": lr,
            "final_train_loss": rep.final_loss, "peak_memory_mb": rep.peak_memory_mb,
            "trainable_params": trainable_params(net),
            "train_pairs": steps * rep.batch_rows, "batch_rows": rep.batch_rows,
            "cuda_graphs": float(rep.cuda_graphs), **convergence(rep.first_loss, rep.final_loss,
                                                                 [e for *_, e in rep.heldout], g),
        }  # fmt: skip
        curve = [{"curve": "adamw_loss", "x": s, "y": loss} for s, loss in rep.curve]
        curve += [
            {"curve": "adamw_heldout", "x": s, "seconds": secs, "y": mse}
            for s, secs, mse in rep.heldout
        ]
        return net, metrics, curve
    metrics = {
        "fit_seconds": sum(f.gram_seconds + f.solve_seconds for f in fits),
        "gram_seconds": sum(f.gram_seconds for f in fits),
        "solve_seconds": sum(f.solve_seconds for f in fits),
        "peak_memory_mb": max(f.peak_memory_mb for f in fits),
        "trainable_params": sum(f.n_features for f in fits) * x_fit.shape[1],
        "train_pairs": sum(f.n_train for f in fits),
        "lam_rel_median": float(torch.tensor([f.lam_rel for f in fits]).median()),
        "kappa_max": max(f.kappa for f in fits),
        "n_features": fits[0].n_features,
        "eigh_fallbacks": sum(f.fallback is not None for f in fits),
    }  # fmt: skip
    curve = [
        {"curve": "lambda", "bucket": b, "x": lam, "y": mse}
        for b, f in enumerate(fits)
        for lam, mse in f.curve.items()
    ]
    return net, metrics, curve


def known_setting(cfg: dict, dataset: str, setting_name: str) -> Setting:
    """The configured setting of that name on ``dataset``; ValueError naming the known ones."""
    known = settings(cfg, dataset)
    if setting_name not in known:
        raise ValueError(f"setting {setting_name!r} is not configured for {dataset}: {list(known)}")
    return known[setting_name]


def read_lr(path: str | None, setting: Setting) -> float | None:
    """The learning rate the grid job picked (``lr.json``), for an AdamW setting; for an
    output-layer arm's later seed, the rate its first seed picked (that run's ``metrics.json``;
    None: this run picks it)."""
    if setting.method == "adamw_out":
        return None if not path else first_seed_lr(path, setting)
    if setting.method != "adamw":
        return None
    if not path:
        raise ValueError(
            f"setting {setting.name!r} trains by AdamW: pass --lr, the lr.json of its family's "
            "grid's pick (gen-lr-pick)"
        )
    pick = json.loads(Path(path).read_text())
    if pick.get("family") != setting.family:
        raise ValueError(f"{path} is the grid of {pick.get('family')!r}, not of {setting.family!r}")
    return float(pick["lr"])


def first_seed_lr(path: str, setting: Setting) -> float:
    """The rate an output-layer arm's first seed picked on its grid: the ``adamw_lr`` row of that
    run's ``metrics.json``, which must be a run of the same setting that chose its rate."""
    rows = {r["metric"]: r for r in read_records([path])}
    pick, chosen = rows.get("adamw_lr"), rows.get("lr_chosen_here")
    if pick is None or pick.get("variant") != setting.name or not (chosen and chosen["value"]):
        raise ValueError(f"{path} is not the record of a {setting.name!r} run that chose its "
                         "rate on the grid (generative.adamw_out.lr_grid): rerun that first seed")  # fmt: skip
    return float(pick["value"])
