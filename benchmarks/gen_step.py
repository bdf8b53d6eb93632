"""The generative AdamW arms' training step, eager against replayed from a CUDA graph.

    python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --batch 2048 --out x.json

For each image size (MNIST 784, CIFAR-10 3,072 values), model (flow: one output map; bucketed
diffusion: ten maps on one random layer, each row through its own bucket's map as the pipeline
draws them, ``batch // 10`` rows per bucket) and batch, the same network trains ``--steps`` steps of
``pillm.generative.train.train_regression`` twice in one process, eagerly and with the step
replayed from a CUDA graph (the pipeline's path), TF32 on as in the pipeline's AdamW arms. It
prints ms per step (the function's own clock: warm-up and capture excluded) and the largest
difference between the two loss curves. ``--align 1`` builds the nets without the alignment
padding of their features (``pillm.generative.features.ALIGN``): odd feature counts, Ampere GEMMs.
``--tiny``: small shapes, for a CPU smoke test (there both runs are eager).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.core.runtime import kernel_profile, resolve_device  # noqa: E402
from pillm.generative import features  # noqa: E402
from pillm.generative.diffusion import (  # noqa: E402
    EpsModel,
    bucket_edges,
    stratified_timesteps,
)
from pillm.generative.features import FeatureConfig, RandomFeatureNet  # noqa: E402
from pillm.generative.train import TrainConfig, train_regression  # noqa: E402


def one_run(dim, width, buckets, batch, steps, device, graphs, bf16=False, compile_mode=None):
    feats = FeatureConfig(width=width, direct_link=True)
    net = RandomFeatureNet(dim, dim, feats, seed=0, trainable=True).to(device)
    model = net if buckets == 1 else EpsModel(net, 1000, buckets, trainable=True).to(device)
    g = torch.Generator(device=device).manual_seed(1)
    data = torch.rand(4096, dim, generator=g, device=device) * 2 - 1

    def draw(step):
        x1 = data[torch.randint(4096, (batch,), generator=g, device=device)]
        x0 = torch.randn(batch, dim, generator=g, device=device)
        if buckets == 1:
            t = torch.rand(batch, generator=g, device=device)
            return (1 - t[:, None]) * x0 + t[:, None] * x1, t, x1 - x0
        return 0.7 * x1 + 0.7 * x0, stratified(g), x0  # the pipeline's per-bucket layout

    if buckets > 1:  # as train_gradient_diffusion: batch // buckets rows per bucket
        batch = max(1, batch // buckets) * buckets
        stratified = stratified_timesteps(bucket_edges(1000, buckets), batch // buckets, device)
    cfg = TrainConfig(steps=steps, batch_size=batch, lr=1e-3, warmup=10, log_every=10, bf16=bf16)
    forward = model.forward_stratified if buckets > 1 else None
    if compile_mode:  # the training forward (and its backward) through Inductor
        forward = torch.compile(forward or model, mode=compile_mode, dynamic=False)
    rep = train_regression(model, draw, cfg, device, "bench", cuda_graphs=graphs, forward=forward)
    timed = steps - (3 if device.startswith("cuda") else 0) - 1  # steps after the clock started
    return 1e3 * rep.seconds / timed, [loss for _, loss in rep.curve], rep.cuda_graphs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, action="append", help="repeatable (default 256, 512)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--tiny", action="store_true", help="small shapes (CPU smoke test)")
    ap.add_argument("--profile", action="store_true", help="print each model's top kernels")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="also the graphed step under bf16 autocast (TrainConfig.bf16)",
    )
    ap.add_argument(
        "--compile",
        metavar="MODE",
        help="also the graphed step with its forward compiled in this torch.compile mode "
        "(e.g. max-autotune-no-cudagraphs: Inductor may pick its own GEMM kernels)",
    )
    ap.add_argument(
        "--blas",
        choices=("cublas", "cublaslt"),
        help="torch.backends.cuda.preferred_blas_library for every GEMM (default: torch's)",
    )
    ap.add_argument(
        "--align",
        type=int,
        default=features.ALIGN,
        help=f"pad the nets' features to a multiple of this (the pipeline's: {features.ALIGN}; 1: "
        "as built, odd)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    features.ALIGN = args.align
    device = resolve_device(args.device)
    if args.blas:
        torch.backends.cuda.preferred_blas_library(args.blas)
    torch.backends.cuda.matmul.allow_tf32 = True  # as the pipeline's AdamW arms (run.tf32)
    dims = {"mnist": 784, "cifar10": 3072} if not args.tiny else {"tiny": 16}
    width = 32 if args.tiny else args.width
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"{name}: AdamW step of the generative arms, width {width}, {args.steps} steps")
    print(f"{'images':8s} {'model':10s} {'batch':>6s} {'eager ms':>9s} {'graph ms':>9s} "
          f"{'speed-up':>8s} {'max |dloss|':>11s}")  # fmt: skip
    rows = []
    for ds, dim in dims.items():
        for model, buckets in (("flow", 1), ("bucketed", 10)):
            if args.profile:  # eagerly: a graph's replays hide their kernels
                b = (args.batch or [512])[0]
                with kernel_profile(device, f"{ds} {model} batch {b}, 40 eager steps"):
                    one_run(dim, width, buckets, b, 40, device, False)
            for batch in args.batch or [256, 512]:
                eager_ms, eager_curve, _ = one_run(
                    dim, width, buckets, batch, args.steps, device, False
                )
                graph_ms, graph_curve, graphed = one_run(
                    dim, width, buckets, batch, args.steps, device, True
                )
                diff = max(abs(a - b) for a, b in zip(eager_curve, graph_curve, strict=True))
                extra = {}
                if args.compile:
                    ms, curve, _ = one_run(
                        dim,
                        width,
                        buckets,
                        batch,
                        args.steps,
                        device,
                        True,
                        compile_mode=args.compile,
                    )
                    diff_c = max(abs(a - b) for a, b in zip(curve, graph_curve, strict=True))
                    extra |= {"compiled_ms": ms, "compiled_max_loss_diff": diff_c}
                    print(f"  compiled ({args.compile}): {ms:.3f} ms, max |dloss| vs graph "
                          f"{diff_c:.2e}", flush=True)  # fmt: skip
                if args.bf16:
                    ms, curve, _ = one_run(
                        dim, width, buckets, batch, args.steps, device, True, True
                    )
                    extra |= {"bf16_ms": ms, "bf16_final_loss": curve[-1],
                              "final_loss": graph_curve[-1]}  # fmt: skip
                    print(f"  bf16 autocast: {ms:.3f} ms, final loss {curve[-1]:.5f} "
                          f"(TF32 {graph_curve[-1]:.5f})", flush=True)  # fmt: skip
                row = {
                    "images": ds, "dim": dim, "model": model, "buckets": buckets, "batch": batch,
                    "eager_ms": eager_ms, "graph_ms": graph_ms, "graphed": graphed,
                    "speedup": eager_ms / graph_ms, "max_loss_diff": diff, **extra,
                }  # fmt: skip
                rows.append(row)
                print(f"{ds:8s} {model:10s} {batch:6d} {eager_ms:9.3f} {graph_ms:9.3f} "
                      f"{eager_ms / graph_ms:7.2f}x {diff:11.2e}", flush=True)  # fmt: skip
    if args.out:
        meta = {"device": name, "torch": torch.__version__, "steps": args.steps, "width": width,
                "blas": args.blas or "default", "compile": args.compile,
                "align": args.align}  # fmt: skip
        args.out.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
