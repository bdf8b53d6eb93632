"""The generative study: which fits the config asks for, and one job per (dataset, setting, seed).

A *setting* is one model fitted one way: PIL flow matching or PIL diffusion (closed-form output
layer, flow.py / diffusion.py); the same network with every weight trained by AdamW, at the
learning rate its family's grid job picked on held-out images (tuning.py) and for the configured
steps, its held-out error recorded along the way (the curve the speed comparison reads); or AdamW
on the PIL net's output layer alone over the solve's own features and pairs until its held-out
error flattens (adamw_out.py). The arms come in families of one network
(pillm.generative.plan.FAMILIES) and run every seed; ablations (feature width,
single vs Bi-PIL, time encoding) run the first seed; the λ ablation is the held-out curve every
PIL fit records and the ODE-step ablation is sampled from the PIL flow, so neither costs a refit.

Every job scores its samples against real test images in the features of the classifier the
``gen_classifier`` job trained on the same dataset (classifier.py: Fréchet distance, KID and
1-NN accuracy in *those* features, not Inception's) and writes ``metrics.json`` (tidy rows),
``curves.parquet`` (λ curve, or AdamW's loss and held-out curves), ``samplers.parquet`` (quality
per ODE solver and step count) and a sample grid.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from pillm.core.log import process_seconds, say
from pillm.core.records import provenance, tidy_records, write_json, write_rows_parquet
from pillm.core.runtime import peak_memory_mb, resolve_device, sync, tf32
from pillm.data.image_specs import IMAGE_DATASETS
from pillm.data.images import save_image_grid
from pillm.generative.classifier import features, load_classifier, quality
from pillm.generative.config import GenerativeConfig
from pillm.generative.diffusion import sample_ddpm
from pillm.generative.features import FeatureConfig, align_features
from pillm.generative.fit import diffusion_config, fit_setting, heldout_mse, known_setting, read_lr
from pillm.generative.flow import sample_flow
from pillm.generative.plan import Setting
from pillm.generative.splits import data_policy, fit_data, load_split, run_identity


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
    say(f"{dataset} {setting_name} seed {seed}: loading images on {device}")
    x, x_val = fit_data(images, gen, device)
    test = load_split(images, "test", gen.n_eval, gen.seed)  # its meta: the data's revisions
    real = test.x
    load_seconds = time.perf_counter() - t0
    cuda = device.startswith("cuda")
    say(f"fitting ({setting.method}, {setting.model})")
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
    say(f"sampling and scoring: {len(samplers)} sampler setting(s)")
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
    # and the whole process up to here (the per-job start-up, reported per job).
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
        **provenance(device, test.meta), "model": setting.model, "method": setting.method,
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
