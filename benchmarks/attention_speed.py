"""Benchmark: causal self-attention, forward and backward, the one-tile Triton kernels
(``pillm.models.attention``) against PyTorch's SDPA (its default backend: cuDNN or flash on
Hopper) with the heads split and merged as the model did before, same process.

Both take the (B, T, 3C) qkv projection and return (B, T, C) (the SDPA path: views, transposes
and the merged heads' copy included, as in the model); ms per forward + backward, CUDA events
over ``--iters`` calls after warm-up, and the largest deviation of each from the float32 formula
(no dropout).

    python benchmarks/attention_speed.py --device cuda --batch 32 --batch 256
"""

from __future__ import annotations

import argparse
import json

import torch

from pillm.models.attention import causal_attention, kernels_apply, sdpa_attention


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, action="append", default=None)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dropout", type=float, action="append", default=None)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out")
    args = ap.parse_args()
    if not args.device.startswith("cuda"):
        raise SystemExit("attention_speed.py times CUDA kernels: --device cuda")
    t, h, hd = args.context, args.heads, args.head_dim
    rows = []
    print(f"# {torch.cuda.get_device_name(args.device)}, torch {torch.__version__}; T={t}, "
          f"{h} heads of {hd}, bf16")  # fmt: skip
    print("| batch | dropout | ours ms | SDPA ms | SDPA / ours | ours err | SDPA err |")
    print("|---|---|---|---|---|---|---|")
    for b in args.batch or [32, 256]:
        g = torch.Generator(device=args.device).manual_seed(b)
        qkv = torch.randn(b, t, 3 * h * hd, device=args.device, generator=g)
        if not kernels_apply(qkv, h):
            raise SystemExit(f"the kernels do not take T={t}, head width {hd}")
        x = qkv.bfloat16().requires_grad_()
        dy = torch.randn(b, t, h * hd, device=args.device, generator=g).bfloat16()
        ref = sdpa_attention(qkv, h, 0.0)  # float32
        errs = {name: (fn(x, h, 0.0).float() - ref).abs().max().item()
                for name, fn in (("ours", causal_attention), ("sdpa", sdpa_attention))}  # fmt: skip
        for p in args.dropout or [0.0, 0.1]:
            ms = {}
            for name, fn in (("ours", causal_attention), ("sdpa", sdpa_attention)):

                def step(fn=fn, p=p, x=x, dy=dy):
                    torch.autograd.grad(fn(x, h, p), x, dy)

                ms[name] = time_ms(step, args.iters)
            rows.append({"batch": b, "dropout": p, **{f"{k}_ms": v for k, v in ms.items()},
                         **{f"{k}_err": v for k, v in errs.items()}})  # fmt: skip
            print(f"| {b} | {p} | {ms['ours']:.4f} | {ms['sdpa']:.4f} | "
                  f"{ms['sdpa'] / ms['ours']:.2f} | {errs['ours']:.2e} | {errs['sdpa']:.2e} |")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(args.device), "rows": rows}, f,
                      indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
