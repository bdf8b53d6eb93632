"""PIL fit time against the time AdamW needs to reach the same held-out metric, same device.

For flow matching and ε-prediction diffusion on an image dataset: fit the PIL model (streamed
float64 Gram + ridge path), record its held-out regression MSE, then train the same network
(same init) by AdamW and evaluate the same held-out MSE every ``--eval-every`` steps until it
reaches the PIL value or ``--max-seconds`` run out. Prints a table with the time ratio and the
peak memory of each, and the PIL peak memory at 1x and 4x the pairs (streaming: it should not
grow). Evaluation time is excluded from the AdamW clock.

    python benchmarks/gen_speed.py --dataset mnist --device cuda --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.accel.cuda_graph import GraphedStep  # noqa: E402
from pillm.core.ridge import split_heldout  # noqa: E402
from pillm.core.runtime import peak_memory_mb, sync  # noqa: E402
from pillm.data.images import load_images  # noqa: E402
from pillm.generative.diffusion import (
    DiffusionConfig,
    EpsModel,
    bucket_edges,
    eps_heldout_mse,
    fit_pil_diffusion,
    stratified_timesteps,
)
from pillm.generative.features import FeatureConfig, RandomFeatureNet
from pillm.generative.fit import warm_up_solvers
from pillm.generative.flow import FlowConfig, fit_pil_flow, flow_heldout_mse
from pillm.generative.noise import block_seed


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def adamw_to_target(model, batch, heldout, target, args, device, forward=None) -> dict:
    """AdamW (fused, TF32 on CUDA, constant lr) until held-out MSE <= target, each step as the
    pipeline's arms run it (``pillm.generative.train.train_regression``: on CUDA replayed from a
    CUDA graph, ``pillm.accel.cuda_graph``). The clock excludes evaluation and, as the
    pipeline's, the eager warm-up steps and the capture. ``forward``: the training forward in
    place of ``model`` (the per-bucket arm's stratified batches)."""
    forward = forward or model
    params = [p for p in model.parameters() if p.requires_grad]
    cuda = device.startswith("cuda")
    lr = torch.tensor(args.lr, device=device) if cuda else args.lr  # a graph reads it on device
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=cuda, capturable=cuda)
    torch.backends.cuda.matmul.allow_tf32 = cuda  # as the pipeline's AdamW baselines

    def one_step(x, t, y):
        loss = torch.nn.functional.mse_loss(forward(x, t), y)
        loss.backward()
        opt.step()
        return loss.detach()

    runner = GraphedStep(
        one_step, cuda, lambda: opt.zero_grad(set_to_none=True), name="gen_speed AdamW"
    )
    untimed = runner.warmup + 1 if cuda else 0  # eager warm-up and the captured step
    clock, step, mse, history = 0.0, 0, float("inf"), []
    while clock < args.max_seconds:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.eval_every):
            if untimed and runner.n_calls == untimed:  # graphed from here: (re)start the clock
                sync(device)
                t0 = time.perf_counter()
            runner(*batch())
        sync(device)
        clock += time.perf_counter() - t0
        step += args.eval_every
        model.eval()
        torch.backends.cuda.matmul.allow_tf32 = False  # held-out MSE in fp32, as for PIL
        mse = heldout(model)
        torch.backends.cuda.matmul.allow_tf32 = cuda
        model.train()
        history.append((step, round(clock, 3), mse))
        if mse <= target:
            break
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"seconds": clock, "steps": step, "mse": mse, "reached": mse <= target,
            "graphed": runner.graphed, "peak_mb": peak_memory_mb(device),
            "history": history}  # fmt: skip


def run(args) -> dict:
    device = args.device
    torch.manual_seed(0)
    data = load_images(args.dataset, "train", "local", args.data, args.n_train or None, 0).x
    x, x_val = split_heldout(data, 0.1)
    dim = x.shape[1]
    feats = FeatureConfig(width=args.width, direct_link=True)
    out = {"dataset": args.dataset, "device": device, "n_fit": len(x), "width": args.width,
           "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"}  # fmt: skip
    data_dev = x.to(device)
    n = len(x)

    # ---- flow matching
    warm_up_solvers(device)  # as the pipeline's PIL jobs: no library start-up in the first fit
    rows = {}
    for ppi in (1, args.pairs_per_image):
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        net, fit = fit_pil_flow(x, FlowConfig(feats, ppi, args.chunk), 0, device, x_val=x_val)
        sync(device)
        rows[ppi] = {"seconds": time.perf_counter() - t0, "mse": fit.heldout_mse,
                     "peak_mb": peak_memory_mb(device), "pairs": fit.n_train}  # fmt: skip
    pil = rows[args.pairs_per_image]
    reset_peak(device)
    model = RandomFeatureNet(dim, dim, feats, 0, trainable=True).to(device)
    g = torch.Generator(device=device).manual_seed(block_seed(0, 3, 0))
    bs = args.batch_size

    def flow_batch():
        x1 = data_dev[torch.randint(n, (bs,), generator=g, device=device)]
        x0 = torch.randn(bs, dim, generator=g, device=device)
        t = torch.rand(bs, generator=g, device=device)
        return (1 - t[:, None]) * x0 + t[:, None] * x1, t, x1 - x0

    def flow_val(m):
        return flow_heldout_mse(m, x_val, 0, args.pairs_per_image, args.chunk, device)

    adam = adamw_to_target(model, flow_batch, flow_val, pil["mse"], args, device)
    out["flow"] = {"pil": pil, "pil_1x": rows[1], "adamw": adam}

    # ---- diffusion: PIL and AdamW with the same --buckets ε maps (equal capacity)
    dcfg = DiffusionConfig(features=feats, timesteps=1000, n_buckets=args.buckets,
                           chunk_size=args.chunk)  # fmt: skip
    sched = dcfg.schedule()
    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    eps_model, fits = fit_pil_diffusion(x, dcfg, 0, device, x_val=x_val)
    sync(device)
    secs = time.perf_counter() - t0
    mse = eps_heldout_mse(eps_model, x_val, sched, 0, 1, args.chunk, device)
    pil_d = {"seconds": secs, "mse": mse, "peak_mb": peak_memory_mb(device),
             "pairs": sum(f.n_train for f in fits)}  # fmt: skip
    reset_peak(device)
    net = RandomFeatureNet(dim, dim, feats, 0, trainable=True).to(device)
    model = EpsModel(net, 1000, args.buckets, trainable=True).to(device)  # as many maps as PIL
    ab = sched.alpha_bars.to(device).float()
    # As the pipeline's per-bucket arm: bs // buckets rows per bucket, each through its own map.
    rows = bs // args.buckets * args.buckets
    draw_t = stratified_timesteps(bucket_edges(1000, args.buckets), rows // args.buckets, device)

    def eps_batch():
        x1 = data_dev[torch.randint(n, (rows,), generator=g, device=device)]
        eps = torch.randn(rows, dim, generator=g, device=device)
        t = draw_t(g)
        a = ab[t][:, None]
        return a.sqrt() * x1 + (1 - a).sqrt() * eps, t, eps

    def eps_val(m):
        return eps_heldout_mse(m, x_val, sched, 0, 1, args.chunk, device)

    forward = model.forward_stratified if args.buckets > 1 else model
    out["diffusion"] = {"pil": pil_d, "adamw": adamw_to_target(model, eps_batch, eps_val,
                                                               pil_d["mse"], args, device,
                                                               forward)}  # fmt: skip
    return out


def report(res: dict) -> str:
    lines = [f"{res['dataset']} on {res['device_name']}: {res['n_fit']} images, width {res['width']}",
             f"{'model':<10} {'PIL s':>7} {'PIL MSE':>9} {'AdamW s':>8} {'steps':>7} {'AdamW MSE':>10}"
             f" {'reached':>7} {'ratio':>7} {'PIL MiB':>8} {'AdamW MiB':>9}"]  # fmt: skip
    for model in ("flow", "diffusion"):
        p, a = res[model]["pil"], res[model]["adamw"]
        ratio = a["seconds"] / p["seconds"]
        lines.append(
            f"{model:<10} {p['seconds']:7.2f} {p['mse']:9.4f} {a['seconds']:8.2f} {a['steps']:7d}"
            f" {a['mse']:10.4f} {str(a['reached']):>7} {ratio:6.1f}x {p['peak_mb']:8.0f}"
            f" {a['peak_mb']:9.0f}"
        )
    one, full = res["flow"]["pil_1x"], res["flow"]["pil"]
    lines.append(
        f"PIL flow streaming: {one['pairs']} pairs {one['peak_mb']:.0f} MiB, {full['pairs']} pairs "
        f"{full['peak_mb']:.0f} MiB (ratio {full['peak_mb'] / one['peak_mb']:.2f}), "
        f"fit {one['seconds']:.2f} s vs {full['seconds']:.2f} s"
    )
    if res["device"] == "cpu":  # ru_maxrss only grows: a later figure includes the earlier ones
        lines.append("CPU: MiB figures are the process's peak resident memory so far, not each "
                     "fit's own (only CUDA counts each fit's peak)")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n-train", type=int, default=0)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--pairs-per-image", type=int, default=4)
    p.add_argument("--buckets", type=int, default=10)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--out", help="write the full results (incl. AdamW histories) as JSON")
    args = p.parse_args()
    if args.batch_size < args.buckets:  # the diffusion arm draws batch_size // buckets rows a map
        p.error(f"--batch-size {args.batch_size} < --buckets {args.buckets}: every bucket's map "
                "needs at least one row a step")  # fmt: skip
    res = run(args)
    print(report(res))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
