"""The generative arms' output layer in TF32 with its feature count as the nets build it (odd:
width + D + 1) and padded with zero features to a multiple of 4 or 16.

    python benchmarks/gemm_align.py --device cuda --batch 256 --batch 512 --out gemm_align.json

Why: a row-major float32 matrix whose row length is not a multiple of 4 has rows that are not
16-byte aligned, and Hopper's TMA-fed GEMM kernels need 16-byte aligned rows, so cuBLAS falls
back to Ampere-generation kernels (a profile of the unpadded AdamW step shows only
``cutlass_80_tensorop_s1688gemm_*``). Per image size (MNIST 784, CIFAR-10 3,072), model (flow:
one map; bucketed: ten maps, one batched product) and batch, it times the output layer's
forward and backward (``H @ W_out``, then ``dH`` and ``dW_out``) for each padding, prints ms,
TFLOP/s and the GEMM kernels that ran, and the largest difference of the outputs and gradients
from the unpadded product (zero features add exact zeros, so only the summation order differs).
Then the PIL fits' float64 Gram update (``hth += hᵀh`` over a chunk, as
``pillm.core.ridge.GramStats.update``) with h and hth stored as built and at padded row lengths
(the same p features: views of wider buffers). ``--tiny``: small shapes (a CPU smoke test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.core.runtime import resolve_device, sync  # noqa: E402
from pillm.generative.features import FeatureConfig  # noqa: E402

PADS = (1, 4, 16)  # feature count rounded up to a multiple of this (1: as built)


def padded(p: int, multiple: int) -> int:
    return -(-p // multiple) * multiple


def operands(buckets, rows, p, dim, pad_to, device):
    """H (rows x p features, zero columns up to the padding) and W_out (zero rows likewise),
    the same values at every padding (drawn at the unpadded size from one seed)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    lead = (buckets,) if buckets > 1 else ()
    h = torch.randn(*lead, rows, p, generator=g)
    w = torch.randn(*lead, p, dim, generator=g) / p**0.5
    dy = torch.randn(*lead, rows, dim, generator=g)
    q = padded(p, pad_to)
    h = torch.nn.functional.pad(h, (0, q - p))
    w = torch.nn.functional.pad(w, (0, 0, 0, q - p))
    return h.to(device).requires_grad_(), w.to(device).requires_grad_(), dy.to(device)


def step(h, w, dy):
    y = h @ w
    dh, dw = torch.autograd.grad(y, (h, w), dy)
    return y, dh, dw


def time_ms(h, w, dy, iters, device):
    for _ in range(3):
        step(h, w, dy)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        step(h, w, dy)
    sync(device)
    return 1e3 * (time.perf_counter() - t0) / iters


def gemm_kernels(h, w, dy, device) -> list[str]:
    """Names of the GEMM kernels one forward and backward ran (CUDA only)."""
    if not device.startswith("cuda"):
        return []
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(h, w, dy)
        sync(device)
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    return sorted(n[:90] for n in names if "gemm" in n.lower() or "xmma" in n or "cutlass" in n)


def gram_ms(m: int, p: int, ld: int, iters: int, device: str) -> tuple[float, Tensor]:
    """ms of one float64 ``hth += hᵀh`` (the PIL Gram's update, chunk of m rows) with h and hth
    stored at row length ``ld`` >= p (views of wider buffers when ld > p), and the result."""
    g = torch.Generator(device="cpu").manual_seed(0)
    h = torch.zeros(m, ld, dtype=torch.float64, device=device)[:, :p]
    h.copy_(torch.randn(m, p, generator=g))
    hth = torch.zeros(p, ld, dtype=torch.float64, device=device)[:, :p]
    for _ in range(2):
        hth.addmm_(h.T, h)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        hth.addmm_(h.T, h)
    sync(device)
    return 1e3 * (time.perf_counter() - t0) / iters, hth / (iters + 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, action="append", help="repeatable (default 256, 512)")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--gram-chunk", type=int, default=4096, help="rows per Gram update")
    ap.add_argument("--tiny", action="store_true", help="small shapes (CPU smoke test)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # as the pipeline's AdamW arms
    dims = {"mnist": 784, "cifar10": 3072} if not args.tiny else {"tiny": 13}
    width = 32 if args.tiny else args.width
    features = FeatureConfig(width=width, direct_link=True)  # the arms' layer
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"{name}: output layer H @ W_out in TF32, forward and backward, width {width}")
    print(f"{'images':8s} {'model':9s} {'batch':>5s} {'features':>8s} {'ms':>7s} "
          f"{'TFLOP/s':>8s} {'x as built':>10s} {'max |diff|':>10s}  kernels")  # fmt: skip
    rows = []
    for ds, dim in dims.items():
        p = features.n_features(dim)  # width + D + 1, as the nets build it
        for model, buckets in (("flow", 1), ("bucketed", 10)):
            for batch in args.batch or [256, 512]:
                per = max(1, batch // buckets)
                ref, base_ms = None, None
                for pad_to in PADS:
                    h, w, dy = operands(buckets, per, p, dim, pad_to, device)
                    ms = time_ms(h, w, dy, args.iters, device)
                    y, dh, dw = step(h, w, dy)
                    out = (y, dh[..., :p], dw[..., :p, :])
                    if ref is None:
                        ref, base_ms = out, ms
                    diff = max((a - b).abs().max().item() for a, b in zip(out, ref, strict=True))
                    flops = 3 * 2 * buckets * per * p * dim  # forward, dH, dW_out
                    kernels = gemm_kernels(h, w, dy, device)
                    row = {"images": ds, "model": model, "batch": batch, "features": p,
                           "padded_to": padded(p, pad_to), "ms": ms,
                           "tflops": flops / ms / 1e9, "speedup": base_ms / ms,
                           "max_diff": diff, "kernels": kernels}  # fmt: skip
                    rows.append(row)
                    print(f"{ds:8s} {model:9s} {batch:5d} {padded(p, pad_to):8d} {ms:7.3f} "
                          f"{row['tflops']:8.1f} {row['speedup']:9.2f}x {diff:10.2e}  "
                          f"{'; '.join(k[:48] for k in kernels)}", flush=True)  # fmt: skip
    grams = []
    chunk = 64 if args.tiny else args.gram_chunk
    print(f"\nPIL Gram update hth += hᵀh in float64, chunk {chunk} rows (TF32 off)")
    print(f"{'images':8s} {'features':>8s} {'row length':>10s} {'ms':>7s} {'TFLOP/s':>8s} "
          f"{'x as built':>10s} {'max |diff|':>10s}")  # fmt: skip
    for ds, dim in dims.items():
        p = features.n_features(dim)
        base = None
        for pad_to in PADS:
            ms, hth = gram_ms(chunk, p, padded(p, pad_to), max(3, args.iters // 5), device)
            base = base or (ms, hth)
            diff = (hth - base[1]).abs().max().item()
            row = {"images": ds, "features": p, "row_length": padded(p, pad_to), "ms": ms,
                   "tflops": 2 * chunk * p * p / ms / 1e9, "speedup": base[0] / ms,
                   "max_diff": diff}  # fmt: skip
            grams.append(row)
            print(f"{ds:8s} {p:8d} {padded(p, pad_to):10d} {ms:7.3f} {row['tflops']:8.1f} "
                  f"{row['speedup']:9.2f}x {diff:10.2e}", flush=True)  # fmt: skip
    if args.out:
        meta = {"device": name, "torch": torch.__version__, "width": width, "iters": args.iters}
        args.out.write_text(json.dumps({"meta": meta, "runs": rows, "gram": grams}, indent=1))


if __name__ == "__main__":
    main()
