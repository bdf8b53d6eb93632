"""The generative study: which fits the config asks for, and one job per (dataset, setting).

A *setting* is one model fitted one way: PIL flow matching or PIL diffusion (closed-form output
layer, flow.py / diffusion.py) or the same network trained end to end by AdamW at a budget
counted in training pairs, a multiple of what the PIL solve streams. Ablations (feature width,
single vs Bi-PIL, time encoding, shared vs bucketed ε weights) are further settings on
``generative.ablation_datasets``; the λ ablation is the held-out curve every PIL fit records and
the ODE-step ablation is sampled from the main flow fit, so neither costs a refit.

Every job scores its samples against real test images in the features of the classifier the
``gen_classifier`` job trained on the same dataset (sample_quality.py: Fréchet distance, KID and
1-NN accuracy in *those* features, not Inception's) and writes ``metrics.json`` (tidy rows),
``curves.parquet`` (λ curve or AdamW loss curve), ``samplers.parquet`` (quality per ODE solver and
step count) and a sample grid.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from pillm.core.records import (
    IDENTITY,
    atomic_path,
    provenance,
    tidy_records,
    write_json,
    write_rows_parquet,
)
from pillm.core.runtime import peak_memory_mb, resolve_device
from pillm.data.images import (
    IMAGE_DATASETS,
    ImageData,
    load_images,
    save_image_grid,
    subset_rows,
)
from pillm.generative.diffusion import (
    DiffusionConfig,
    eps_heldout_mse,
    fit_pil_diffusion,
    sample_ddpm,
    train_gradient_diffusion,
)
from pillm.generative.flow import (
    FeatureConfig,
    FlowConfig,
    TrainConfig,
    fit_pil_flow,
    flow_heldout_mse,
    sample_flow,
    split_heldout,
    sync_device,
    train_gradient_flow,
)
from pillm.generative.sample_quality import (
    FeatureCNN,
    extract_features,
    sample_quality,
    train_feature_classifier,
)
from pillm.plan import Setting, settings

# ------------------------------------------------------------------------------------ data


def prepare_images(dataset: str, data: dict, out_path: str) -> None:
    """Decode both splits once (local mirror, checksum-verified, or hub) into one uint8 .npz that
    every job of the dataset reads: the decode costs seconds, the read milliseconds."""
    arrays, meta = {}, {}
    for split in ("train", "test"):
        d = load_images(dataset, split, data["source"], data["local_dir"], None, None)
        arrays[f"{split}_x"] = ((d.x + 1) * 127.5).round().to(torch.uint8).numpy()
        arrays[f"{split}_y"] = d.labels.numpy()
        meta[split] = {k: v for k, v in d.meta.items() if isinstance(v, str | int)}
        meta[split]["dataset"] = dataset
    arrays["meta"] = np.array(json.dumps(meta))
    with atomic_path(out_path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def load_split(images: str, split: str, limit: int, seed: int) -> ImageData:
    """``limit`` images of ``split`` (0: all), the same seeded subset ``load_images`` takes."""
    with np.load(images) as z:
        x, y = z[f"{split}_x"], z[f"{split}_y"]
        meta = json.loads(str(z["meta"]))[split]
    rows = subset_rows(len(x), limit or None, seed)
    xt = torch.from_numpy(x[rows]).float() / 127.5 - 1.0
    shape = IMAGE_DATASETS[meta["dataset"]].shape
    return ImageData(xt, torch.from_numpy(y[rows]), shape, torch.from_numpy(rows), meta)


def data_policy(cfg: dict, n_fit: int, n_val: int) -> str:
    return (
        f"train split: {n_fit} images fitted, {n_val} held out for lambda; "
        f"samples scored against {cfg['n_eval']} test images"
    )


# ------------------------------------------------------------------------------ classifier


def classifier_job(dataset: str, cfg: dict, images: str, device: str, out_dir: str) -> None:
    """Train the feature CNN that sample quality is measured in; record its accuracy and the
    real-vs-real floor of every metric (held-out train images against test images)."""
    device = resolve_device(device)
    c = cfg["classifier"]
    t0 = time.perf_counter()
    train = load_split(images, "train", c["n_train"], cfg["seed"])
    test = load_split(images, "test", cfg["n_eval"], cfg["seed"])
    model, acc = train_feature_classifier(
        train.x, train.labels, test.x, test.labels, train.shape,
        epochs=c["epochs"], batch_size=c["batch_size"], lr=c["lr"], feat_dim=c["feat_dim"],
        seed=cfg["seed"], device=device,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    # Floor of every metric: real train images the classifier never saw, against the test set.
    real = load_split(images, "train", 0, cfg["seed"])
    unseen = torch.ones(len(real), dtype=torch.bool)
    unseen[train.index] = False
    pool = real.x[unseen] if int(unseen.sum()) >= cfg["n_eval"] else real.x
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    floor_x = pool[torch.randperm(pool.shape[0], generator=g)[: cfg["n_eval"]]]
    q = quality(model, features(model, test.x, device), floor_x, cfg, device)
    out = Path(out_dir)
    with atomic_path(out / "classifier.pt") as tmp:
        torch.save({"state": model.state_dict(), "shape": train.shape, "cfg": c}, tmp)
    metrics = {"test_accuracy": acc, "train_seconds": seconds, **q}
    identity = run_identity(
        dataset, "classifier", cfg, f"{len(train)} train images, {len(test)} test"
    )
    write_json(out / "classifier.json", tidy_records(identity, metrics, provenance(device)))


def load_classifier(path: str, device: str) -> FeatureCNN:
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    c = ckpt["cfg"]
    model = FeatureCNN(tuple(ckpt["shape"]), feat_dim=c["feat_dim"])
    model.load_state_dict(ckpt["state"])
    return model.to(device).eval()


def features(classifier: FeatureCNN, x: torch.Tensor, device: str) -> torch.Tensor:
    """Classifier features (float64) on ``device``; inputs clamped to the data range [-1, 1]."""
    return extract_features(classifier.features, x.clamp(-1, 1)).to(device)


def quality(
    classifier: FeatureCNN, feats_real: torch.Tensor, fake: torch.Tensor, cfg: dict, device: str
) -> dict:
    """Sample-quality metrics of ``fake`` against precomputed real features, on ``device``."""
    return sample_quality(
        feats_real, features(classifier, fake, device), cfg["kid_subsets"],
        cfg["kid_subset_size"], seed=cfg["seed"],
    )  # fmt: skip


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 matmuls on CUDA for AdamW training and sampling (not for the PIL Gram/solve): the
    gradient baseline gets the speed trick a practitioner would use."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def run_identity(dataset: str, setting: str, cfg: dict, policy: str) -> dict:
    identity = {
        "experiment": "generative", "variant": setting, "seed": cfg["seed"], "corpus": dataset,
        "tokenizer": "-", "data_policy": policy,
    }  # fmt: skip
    assert set(identity) == set(IDENTITY)
    return identity


# -------------------------------------------------------------------------------- fit jobs


def adamw_steps(setting: Setting, pil_pairs: int, batch_size: int) -> int:
    """AdamW steps that see ``budget`` times the pairs the PIL solve streams."""
    return max(1, math.ceil(setting.budget * pil_pairs / batch_size))


def pil_pairs(setting: Setting, cfg: dict, n_fit: int) -> int:
    """Training pairs the matching PIL fit streams (the unit of the AdamW budget)."""
    if setting.model == "flow":
        return n_fit * cfg["flow"]["pairs_per_image"]
    d = cfg["diffusion"]
    return n_fit * d["pairs_per_image"] * d["n_buckets"]


def fit_setting(setting: Setting, cfg: dict, x_fit, x_val, device: str):
    """Fit one setting. Returns (callable model, metrics, curve rows)."""
    feats = FeatureConfig(**setting.feature_options(cfg))
    lambdas = tuple(cfg["lambdas"])
    seed, chunk = cfg["seed"], cfg["chunk_size"]
    d = cfg["diffusion"]
    dcfg = DiffusionConfig(
        features=feats, timesteps=d["timesteps"], beta_start=d["beta_start"],
        beta_end=d["beta_end"], n_buckets=setting.n_buckets or 1,
        pairs_per_image=d["pairs_per_image"], chunk_size=chunk, lambdas=lambdas,
    )  # fmt: skip
    if setting.method == "pil" and setting.model == "flow":
        fcfg = FlowConfig(feats, cfg["flow"]["pairs_per_image"], chunk, lambdas)
        net, fit = fit_pil_flow(x_fit, fcfg, seed, device, x_val=x_val)
        fits = [fit]
    elif setting.method == "pil":
        net, fits = fit_pil_diffusion(x_fit, dcfg, seed, device, x_val=x_val)
    else:
        g = cfg["gradient"]
        steps = adamw_steps(setting, pil_pairs(setting, cfg, x_fit.shape[0]), g["batch_size"])
        tcfg = TrainConfig(
            steps=steps, batch_size=g["batch_size"], lr=g["lr"],
            warmup=max(1, min(g["warmup"], steps // 10)), log_every=max(1, steps // 50),
        )  # fmt: skip
        if setting.model == "flow":
            net, rep = train_gradient_flow(x_fit, feats, tcfg, seed, device)
        else:
            net, rep = train_gradient_diffusion(x_fit, dcfg, tcfg, seed, device)
        metrics = {
            "fit_seconds": rep.seconds, "adamw_steps": steps, "final_train_loss": rep.final_loss,
            "peak_memory_mb": rep.peak_memory_mb,
            "trainable_params": sum(p.numel() for p in net.parameters() if p.requires_grad),
            "train_pairs": steps * g["batch_size"],
        }  # fmt: skip
        curve = [{"curve": "adamw_loss", "x": s, "y": loss} for s, loss in rep.curve]
        return net, metrics, curve
    metrics = {
        "fit_seconds": sum(f.gram_seconds + f.solve_seconds for f in fits),
        "gram_seconds": sum(f.gram_seconds for f in fits),
        "solve_seconds": sum(f.solve_seconds for f in fits),
        "peak_memory_mb": max(f.peak_memory_mb for f in fits),
        "trainable_params": sum(f.n_features for f in fits) * x_fit.shape[1],
        "train_pairs": sum(f.n_pairs for f in fits),
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


def generative_job(
    dataset: str,
    setting_name: str,
    cfg: dict,
    images: str,
    classifier_path: str,
    device: str,
    out_dir: str,
) -> None:
    device = resolve_device(device)
    known = settings(cfg, dataset)
    if setting_name not in known:
        raise ValueError(f"setting {setting_name!r} is not configured for {dataset}: {list(known)}")
    setting = known[setting_name]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    x, x_val = split_heldout(
        load_split(images, "train", cfg["n_train"], cfg["seed"]).x, cfg["heldout_fraction"]
    )
    real = load_split(images, "test", cfg["n_eval"], cfg["seed"]).x
    load_seconds = time.perf_counter() - t0
    cuda = device.startswith("cuda")
    with tf32(cuda and setting.method == "adamw"):
        net, metrics, curve = fit_setting(setting, cfg, x, x_val, device)
    seed, dim = cfg["seed"], x.shape[1]
    if setting.model == "flow":
        metrics["heldout_mse"] = flow_heldout_mse(
            net, x_val, seed, cfg["flow"]["pairs_per_image"], cfg["chunk_size"], device
        )
    else:
        sched = DiffusionConfig(
            timesteps=cfg["diffusion"]["timesteps"], beta_start=cfg["diffusion"]["beta_start"],
            beta_end=cfg["diffusion"]["beta_end"],
        ).schedule()  # fmt: skip
        metrics["heldout_mse"] = eps_heldout_mse(
            net, x_val, sched, seed, cfg["diffusion"]["pairs_per_image"], cfg["chunk_size"], device
        )
    classifier = load_classifier(classifier_path, device)
    feats_real = features(classifier, real, device)
    samplers = sampler_grid(setting, cfg)
    rows, grid = [], None
    for method, steps in samplers:
        sync_device(torch.device(device))
        ts = time.perf_counter()
        with torch.no_grad(), tf32(cuda):
            if setting.model == "flow":
                fake = sample_flow(net, cfg["n_eval"], dim, steps, method, seed, device)
            else:
                fake = sample_ddpm(
                    net, cfg["n_eval"], dim, sched, seed, device,
                    variance=cfg["diffusion"]["variance"], clip_x0=cfg["diffusion"]["clip_x0"],
                )  # fmt: skip
        sync_device(torch.device(device))
        secs = time.perf_counter() - ts
        q = quality(classifier, feats_real, fake, cfg, device)
        if cfg.get("real_fid"):
            from pillm.generative.real_fid import real_fid

            q["fid"] = real_fid(real, fake, IMAGE_DATASETS[dataset].shape, device)
        nfe = steps * (2 if method == "heun" else 1)
        rows.append({"sampler": method, "steps": steps, "nfe": nfe, "sample_seconds": secs, **q})
        if grid is None:
            grid = fake[: cfg["grid"]].cpu()
    main = rows[0]
    metrics.update({k: v for k, v in main.items() if k not in ("sampler",)})
    metrics.update(load_seconds=load_seconds, n_fit=len(x), n_val=len(x_val))
    metrics["peak_memory_mb_job"] = peak_memory_mb(device)
    out = Path(out_dir)
    spec = IMAGE_DATASETS[dataset]
    save_image_grid(grid, spec.shape, out / "samples.png")
    ident = {"dataset": dataset, "setting": setting_name}
    write_rows_parquet(out / "curves.parquet", curve or [{"curve": "none"}], ident)
    write_rows_parquet(out / "samplers.parquet", rows, ident)
    identity = run_identity(dataset, setting_name, cfg, data_policy(cfg, len(x), len(x_val)))
    context = {
        **provenance(device), "model": setting.model, "method": setting.method,
        "ablation": setting.ablation, "level": setting.level,
        "sampler": f"{main['sampler']} {main['steps']}" if setting.model == "flow" else "ddpm",
        "matmul": "tf32 (AdamW, sampling)" if cuda else "fp32",
    }  # fmt: skip
    write_json(out / "metrics.json", tidy_records(identity, metrics, context))


def sampler_grid(setting: Setting, cfg: dict) -> list[tuple[str, int]]:
    """(ODE method, steps): the main sampler first; the main PIL flow also gets the ablation grid."""
    if setting.model == "diffusion":
        return [("ddpm", cfg["diffusion"]["timesteps"])]
    main = (cfg["flow"]["ode_method"], cfg["flow"]["ode_steps"])
    grid = [main]
    if setting.name == "flow_pil":
        for steps in sorted({*cfg["ablations"]["ode_steps"], cfg["flow"]["ode_steps"]}):
            for method in ("euler", "heun"):
                if (method, steps) != main:
                    grid.append((method, steps))
    return grid
