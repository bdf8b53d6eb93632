"""The generative study: which fits the config asks for, and one job per (dataset, setting, seed).

A *setting* is one model fitted one way: PIL flow matching or PIL diffusion (closed-form output
layer, flow.py / diffusion.py) or the same network with every weight trained by AdamW, at the
learning rate its family's grid job picked on held-out images (tuning.py) and for the configured
steps, its held-out error recorded along the way (the curve the speed comparison reads). The arms
come in pairs of one network (pillm.generative.plan.FAMILIES) and run every seed; ablations (feature width,
single vs Bi-PIL, time encoding) run the first seed; the λ ablation is the held-out curve every
PIL fit records and the ODE-step ablation is sampled from the PIL flow, so neither costs a refit.

Every job scores its samples against real test images in the features of the classifier the
``gen_classifier`` job trained on the same dataset (sample_quality.py: Fréchet distance, KID and
1-NN accuracy in *those* features, not Inception's) and writes ``metrics.json`` (tidy rows),
``curves.parquet`` (λ curve, or AdamW's loss and held-out curves), ``samplers.parquet`` (quality
per ODE solver and step count) and a sample grid.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
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
from pillm.core.ridge import split_heldout
from pillm.core.runtime import peak_memory_mb, process_seconds, resolve_device, sync, tf32
from pillm.data.image_specs import IMAGE_DATASETS
from pillm.data.images import (
    ImageData,
    save_image_grid,
    subset_rows,
    to_float,
)
from pillm.generative.config import ClassifierJobConfig, GenerativeConfig
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
    align_features,
    fit_pil_flow,
    flow_heldout_mse,
    sample_flow,
    train_gradient_flow,
    trainable_params,
)
from pillm.generative.plan import Setting, settings
from pillm.generative.sample_quality import (
    FeatureCNN,
    extract_features,
    sample_quality,
    train_feature_classifier,
)

# ------------------------------------------------------------------------------------ data


def load_split(images: str, split: str, limit: int, seed: int) -> ImageData:
    """``limit`` images of ``split`` (0: all), the same seeded subset ``load_images`` takes."""
    with np.load(images) as z:
        x, y = z[f"{split}_x"], z[f"{split}_y"]
        meta = json.loads(str(z["meta"]))[split]
    rows = subset_rows(len(x), limit or None, seed)
    xt = to_float(x[rows])
    shape = IMAGE_DATASETS[meta["dataset"]].shape
    return ImageData(xt, torch.from_numpy(y[rows]), shape, torch.from_numpy(rows), meta)


def data_policy(n_eval: int, n_fit: int, n_val: int) -> str:
    return (
        f"train split: {n_fit} images fitted, {n_val} held out for lambda; "
        f"samples scored against {n_eval} test images"
    )


# ------------------------------------------------------------------------------ classifier


def classifier_job(dataset: str, cfg: dict, images: str, device: str, out_dir: str) -> None:
    """Train the feature CNN that sample quality is measured in; record its accuracy and the
    real-vs-real floor of every metric (held-out train images against test images).

    ``cfg``: the generative keys it uses (a dict, checked here once into ClassifierJobConfig)."""
    gen = ClassifierJobConfig.from_dict(cfg, "generative")
    device = resolve_device(device)
    c = gen.classifier
    t0 = time.perf_counter()
    train = load_split(images, "train", c.n_train, gen.seed)
    test = load_split(images, "test", gen.n_eval, gen.seed)
    model, acc = train_feature_classifier(
        train.x, train.labels, test.x, test.labels, train.shape,
        epochs=c.epochs, batch_size=c.batch_size, lr=c.lr, feat_dim=c.feat_dim,
        seed=gen.seed, device=device,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    # Floor of every metric: real train images the classifier never saw, against the test set.
    real = load_split(images, "train", 0, gen.seed)
    unseen = torch.ones(len(real), dtype=torch.bool)
    unseen[train.index] = False
    pool = real.x[unseen] if int(unseen.sum()) >= gen.n_eval else real.x
    g = torch.Generator().manual_seed(gen.seed + 1)
    floor_x = pool[torch.randperm(pool.shape[0], generator=g)[: gen.n_eval]]
    q = quality(model, features(model, test.x, device), floor_x, gen.kid_subsets,
                gen.kid_subset_size, gen.seed, device)  # fmt: skip
    out = Path(out_dir)
    with atomic_path(out / "classifier.pt") as tmp:
        torch.save({"state": model.state_dict(), "shape": train.shape, "cfg": asdict(c)}, tmp)
    metrics = {"test_accuracy": acc, "train_seconds": seconds, **q}
    identity = run_identity(
        dataset, "classifier", gen.seed, f"{len(train)} train images, {len(test)} test"
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
    classifier: FeatureCNN, feats_real: torch.Tensor, fake: torch.Tensor, kid_subsets: int,
    kid_subset_size: int, seed: int, device: str,
) -> dict:  # fmt: skip
    """Sample-quality metrics of ``fake`` against precomputed real features, on ``device``."""
    return sample_quality(
        feats_real, features(classifier, fake, device), kid_subsets, kid_subset_size, seed=seed
    )


def run_identity(dataset: str, setting: str, seed: int, policy: str) -> dict:
    identity = {
        "experiment": "generative", "variant": setting, "seed": seed, "corpus": dataset,
        "tokenizer": "-", "data_policy": policy,
    }  # fmt: skip
    assert set(identity) == set(IDENTITY)
    return identity


# -------------------------------------------------------------------------------- fit jobs


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
    if setting.method == "pil":
        warm_up_solvers(device)
    if setting.method == "pil" and setting.model == "flow":
        fcfg = FlowConfig(feats, gen.flow.pairs_per_image, chunk, gen.lambdas)
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
            "cuda_graphs": float(rep.cuda_graphs),
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


def fit_data(images: str, gen: GenerativeConfig, device: str):
    """(fitted images, held-out images) on ``device``: the seeded train subset and its held-out
    tail. Copied once here, outside every fit's clock (AdamW's arms and PIL's streamed Gram
    chunks alike): a chunk copied from host memory would make the host wait for the GPU."""
    x = load_split(images, "train", gen.n_train, gen.seed).x.to(device)
    return split_heldout(x, gen.heldout_fraction)


def read_lr(path: str | None, setting: Setting) -> float | None:
    """The learning rate the grid job picked (``lr.json``), for an AdamW setting."""
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


def generative_job(
    dataset: str,
    setting_name: str,
    seed: int,
    cfg: dict,
    images: str,
    classifier_path: str,
    lr_path: str | None,
    device: str,
    out_dir: str,
) -> None:
    """Fit one setting from one seed on one dataset, sample it and score the samples; write the
    run folder. AdamW settings train at the rate of ``lr_path`` (their grid job's pick).

    ``cfg``: the generative section less datasets and classifier (a dict, checked here once
    into GenerativeConfig); the setting list and each setting's features come from pillm.plan,
    which reads the same dict."""
    startup = process_seconds()  # interpreter and imports, before any work
    gen = GenerativeConfig.from_dict(cfg, "generative")
    device = resolve_device(device)
    setting = known_setting(cfg, dataset, setting_name)
    lr = read_lr(lr_path, setting)
    feats = FeatureConfig(**setting.feature_options(cfg))
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    x, x_val = fit_data(images, gen, device)
    real = load_split(images, "test", gen.n_eval, gen.seed).x
    load_seconds = time.perf_counter() - t0
    cuda = device.startswith("cuda")
    with tf32(cuda and setting.method == "adamw"):
        net, metrics, curve = fit_setting(setting, gen, feats, x, x_val, device, seed, lr)
    dim = x.shape[1]
    metrics["heldout_mse"] = heldout_mse(setting, gen, net, x_val, seed, device)
    if cuda:  # a solved net's rows aligned as a trained one's (no-op for those); CPU as solved
        align_features(net)
    sched = diffusion_config(gen, feats).schedule()
    classifier = load_classifier(classifier_path, device)
    feats_real = features(classifier, real, device)
    samplers = sampler_grid(setting, gen, seed == gen.seeds[0])
    rows, grid = [], None
    for method, steps in samplers:
        sync(device)
        ts = time.perf_counter()
        with torch.no_grad(), tf32(cuda):
            if setting.model == "flow":
                fake = sample_flow(net, gen.n_eval, dim, steps, method, seed, device)
            else:
                fake = sample_ddpm(
                    net, gen.n_eval, dim, sched, seed, device,
                    variance=gen.diffusion.variance, clip_x0=gen.diffusion.clip_x0,
                )  # fmt: skip
        sync(device)
        secs = time.perf_counter() - ts
        q = quality(
            classifier, feats_real, fake, gen.kid_subsets, gen.kid_subset_size, seed, device
        )
        if gen.real_fid:
            from pillm.generative.real_fid import real_fid

            q["fid"] = real_fid(real, fake, IMAGE_DATASETS[dataset].shape, device)
        nfe = steps * (2 if method == "heun" else 1)
        rows.append({"sampler": method, "steps": steps, "nfe": nfe, "sample_seconds": secs, **q})
        if grid is None:
            grid = fake[: gen.grid].cpu()
    main = rows[0]
    metrics.update({k: v for k, v in main.items() if k not in ("sampler",)})
    metrics.update(load_seconds=load_seconds, n_fit=len(x), n_val=len(x_val))
    metrics["peak_memory_mb_job"] = peak_memory_mb(device)
    # The job's fixed cost beside its work: interpreter and imports before this function ran,
    # and the whole process up to here (issue #18: per-job start-up, reported per job).
    metrics.update(startup_time_s=startup, job_time_s=process_seconds())
    out = Path(out_dir)
    spec = IMAGE_DATASETS[dataset]
    save_image_grid(grid, spec.shape, out / "samples.png")
    ident = {"dataset": dataset, "setting": setting_name, "seed": seed}
    write_rows_parquet(out / "curves.parquet", curve or [{"curve": "none"}], ident)
    write_rows_parquet(out / "samplers.parquet", rows, ident)
    identity = run_identity(
        dataset, setting_name, seed, data_policy(gen.n_eval, len(x), len(x_val))
    )
    context = {
        **provenance(device), "model": setting.model, "method": setting.method,
        "ablation": setting.ablation, "level": setting.level, "family": setting.family,
        "sampler": f"{main['sampler']} {main['steps']}" if setting.model == "flow" else "ddpm",
        "matmul": "tf32 (AdamW, sampling)" if cuda else "fp32",
    }  # fmt: skip
    write_json(out / "metrics.json", tidy_records(identity, metrics, context))


def sampler_grid(
    setting: Setting, gen: GenerativeConfig, first_seed: bool = True
) -> list[tuple[str, int]]:
    """(ODE method, steps): the main sampler first; the PIL flow's first seed also gets the
    solver/step ablation grid."""
    if setting.model == "diffusion":
        return [("ddpm", gen.diffusion.timesteps)]
    main = (gen.flow.ode_method, gen.flow.ode_steps)
    grid = [main]
    if setting.name == "flow_pil" and first_seed:
        for steps in sorted({*gen.ablations.ode_steps, gen.flow.ode_steps}):
            for method in ("euler", "heun"):
                if (method, steps) != main:
                    grid.append((method, steps))
    return grid
