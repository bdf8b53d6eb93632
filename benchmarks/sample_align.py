"""Benchmark: a solved (PIL) net's sampling step with its features as solved (p = width + D + 1,
odd) and padded with zeros to a multiple of ``flow.ALIGN`` (``align_features``, what the
pipeline samples with since 2026-11-28, as the AdamW arms' nets always were), same process.

For each image size and model (the flow net, the 10-bucket diffusion net), at each ``--batch``:
ms per sampler step (``model(x, t)`` at one timestep, median of ``--repeats`` rounds of
``--steps`` steps, both ways alternating, TF32 as the pipeline samples), the ratio, and the
largest difference between the two ways' samples of a short DDPM / Heun run.

    python benchmarks/sample_align.py --device cuda --batch 512 --batch 2048
    python benchmarks/sample_align.py --tiny                                          # CPU
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from pillm.core.runtime import resolve_device, sync, tf32
from pillm.generative.diffusion import EpsModel, linear_beta_schedule, sample_ddpm
from pillm.generative.flow import FeatureConfig, RandomFeatureNet, align_features, sample_flow

SIZES = {"mnist": 784, "cifar10": 3072}


def solved_net(dim: int, width: int, buckets: int, timesteps: int, device: str) -> torch.nn.Module:
    """A PIL net of the paper's shape with small random solved weights (the cost does not
    depend on their values)."""
    g = torch.Generator().manual_seed(1)
    net = RandomFeatureNet(dim, dim, FeatureConfig(width=width), seed=0, trainable=False)
    net.w_out.normal_(std=1e-3, generator=g)
    if buckets == 1:
        return net.to(device)
    model = EpsModel(net, timesteps, buckets)
    model.w_buckets.normal_(std=1e-3, generator=g)
    return model.to(device)


def step_ms(model, x: torch.Tensor, t, steps: int, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        model(x, t)
    sync(device)
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, action="append", help="rows per step (512, 2048)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true",
                    help="width 64, MNIST only, T = 50 (a CPU smoke test)")  # fmt: skip
    args = ap.parse_args()
    device = resolve_device(args.device)
    width, timesteps, rows = (64, 50, 64) if args.tiny else (4096, 1000, 256)
    sizes = {"mnist": 784} if args.tiny else SIZES
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"# {name}, torch {torch.__version__}, width {width}, ms per sampler step")
    print(f"{'images':>8s} {'model':>9s} {'batch':>6s} {'as solved':>10s} {'aligned':>8s} "
          f"{'ratio':>6s} {'max |d sample|':>15s}")  # fmt: skip
    with torch.no_grad(), tf32(device.startswith("cuda")):
        for images, dim in sizes.items():
            for model_name, buckets in (("flow", 1), ("diffusion", 10)):
                plain = solved_net(dim, width, buckets, timesteps, device)
                aligned = align_features(copy.deepcopy(plain))
                if model_name == "flow":
                    samples = [
                        sample_flow(m, rows, dim, 4, "heun", 0, device) for m in (plain, aligned)
                    ]
                    t = torch.full((1,), 0.5, device=device)
                else:
                    sched = linear_beta_schedule(timesteps)
                    samples = [
                        sample_ddpm(m, rows, dim, sched, 0, device) for m in (plain, aligned)
                    ]
                    t = timesteps // 2
                diff = float((samples[0] - samples[1]).abs().max())
                for batch in args.batch or [512, 2048]:
                    x = torch.randn(batch, dim, device=device)
                    tt = t.expand(batch) if isinstance(t, torch.Tensor) else t
                    times = {"plain": [], "aligned": []}
                    for _ in range(args.repeats):
                        times["plain"].append(step_ms(plain, x, tt, args.steps, device))
                        times["aligned"].append(step_ms(aligned, x, tt, args.steps, device))
                    a, b = (statistics.median(times[k]) for k in ("plain", "aligned"))
                    print(f"{images:>8s} {model_name:>9s} {batch:6d} {a:10.3f} {b:8.3f} "
                          f"{a / b:5.2f}x {diff:15.2e}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
