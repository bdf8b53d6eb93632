"""Benchmark: the output layer + cross-entropy alone, forward and backward, at the paper width.

Rows ``h`` (N, d) float32 (as the final LayerNorm gives them under autocast), a tied output
layer ``w`` (V, d) float32, bf16 matmuls, d = 256 and V = 50,257 by default (GPT-2's vocabulary,
unpadded, as the pipeline's model has it; ``--vocab 50304`` for nanoGPT's padding); N = 4,096 and
32,768 are the trainer's batches of 32 and 256 windows of 128 tokens. Each method computes the
mean loss and both gradients:

- ``dense``: ``F.cross_entropy((h @ w.T).float(), y)`` as the model's head (bf16 logits), eager;
- ``dense-compiled``: the same under ``torch.compile`` (what the trainer's compiled step runs);
- ``chunked``: ``pillm.lm.kernels.linear_ce`` (``--chunk`` rows at a time, torch ops);
- ``fused[<blocks>]``: ``pillm.lm.kernels.fused_ce`` (Triton), once per ``--blocks`` tile setting;
- ``cce`` / ``liger``: cut-cross-entropy's and liger-kernel's fused linear cross-entropy where
  importable (bf16 operands).

Time per call (CUDA events, median of ``--iters`` after warm-up), the head's FLOP/s counting
its three matmuls (6 N V d), peak memory, and the deviation from ``dense`` (loss, and the
largest gradient error relative to the largest gradient entry).

    python benchmarks/output_layer_speed.py --device cuda --blocks "" --blocks dx_m=64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from pillm.lm.kernels import fused_ce
from pillm.lm.kernels.fused_ce import Blocks, fused_linear_cross_entropy
from pillm.lm.kernels.linear_ce import linear_cross_entropy


def dense(h, w, y):
    return F.cross_entropy((h.to(torch.bfloat16) @ w.to(torch.bfloat16).T).float(), y)


def methods(args) -> dict:
    """name -> (h, w, y) -> loss, or an error text where a library is not importable."""
    out = {"dense": dense, "dense-compiled": torch.compile(dense)}
    out["chunked"] = lambda h, w, y: linear_cross_entropy(h, w, y, args.chunk, torch.bfloat16)
    for text in args.blocks or [""]:
        blocks = Blocks.parse(text)

        def fused(h, w, y, blocks=blocks):
            fused_ce.BLOCKS = blocks  # read by the op at each call
            return fused_linear_cross_entropy(h, w, y, compute_dtype=torch.bfloat16)

        out[f"fused[{text}]"] = fused
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        out["cce"] = lambda h, w, y: cce(h.to(torch.bfloat16), w.to(torch.bfloat16), y)
    except ImportError as err:
        out["cce"] = f"not importable ({err})"
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()
        out["liger"] = lambda h, w, y: liger(w.to(torch.bfloat16), h.to(torch.bfloat16), y)
    except ImportError as err:
        out["liger"] = f"not importable ({err})"
    return out


def run(fn, h, w, y, iters: int, device: str):
    """(median seconds per forward + backward, loss, dh, dw, peak MiB)."""
    hg, wg = h.clone().requires_grad_(), w.clone().requires_grad_()

    def once():
        hg.grad = wg.grad = None
        loss = fn(hg, wg, y)
        loss.backward()
        return loss

    for _ in range(3):
        loss = once()
    times = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = once()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    peak = torch.cuda.max_memory_allocated() / 2**20
    return statistics.median(times), loss.item(), hg.grad.float(), wg.grad.float(), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, action="append", default=None, help="N (repeatable)")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=4096, help="rows per chunk of 'chunked'")
    ap.add_argument("--blocks", action="append", default=None,
                    help="fused_ce tile settings, e.g. 'dx_m=64,dw_n=64' ('' = defaults)")  # fmt: skip
    ap.add_argument("--only", action="append",
                    help="a method name, 'fused' for every --blocks setting (repeatable; "
                         "default: all)")  # fmt: skip
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    if not args.device.startswith("cuda"):
        raise SystemExit("output_layer_speed times CUDA kernels: pass --device cuda on a GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    report = {"device": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
              "vocab": args.vocab, "width": args.width, "runs": [], "skipped": {}}  # fmt: skip
    table = methods(args)
    if args.only:
        table = {k: v for k, v in table.items() if k.split("[")[0] in args.only}
    for n in args.rows or [4096, 32768]:
        g = torch.Generator(device=args.device).manual_seed(n)
        h = torch.randn(n, args.width, device=args.device, generator=g)
        w = 0.02 * torch.randn(args.vocab, args.width, device=args.device, generator=g)
        y = torch.randint(0, args.vocab, (n,), device=args.device, generator=g)
        _, ref_loss, ref_dh, ref_dw, _ = run(dense, h, w, y, 1, args.device)
        for name, fn in table.items():
            if isinstance(fn, str):
                report["skipped"][name] = fn
                continue
            try:
                sec, loss, dh, dw, peak = run(fn, h, w, y, args.iters, args.device)
            except Exception as err:  # noqa: BLE001 - a failing method is reported, not fatal
                report["skipped"][f"{name} at N={n}"] = f"{type(err).__name__}: {err}"[:300]
                print(f"failed: {name} at N={n}: {err}", file=sys.stderr, flush=True)
                continue
            row = {
                "method": name, "rows": n, "ms": 1e3 * sec,
                "tflops": 6 * n * args.vocab * args.width / sec / 1e12, "peak_mb": peak,
                "loss_diff": loss - ref_loss,
                "dh_err": ((dh - ref_dh).abs().max() / ref_dh.abs().max()).item(),
                "dw_err": ((dw - ref_dw).abs().max() / ref_dw.abs().max()).item(),
            }  # fmt: skip
            report["runs"].append(row)
            print(f"N={n} {name}: {row['ms']:.3f} ms", file=sys.stderr, flush=True)
            del dh, dw
            torch.cuda.empty_cache()
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"# {report['device']}, torch {torch.__version__}, V={args.vocab}, d={args.width}")
    print("| N | method | ms | head TFLOP/s | peak MiB | loss - dense | dh err | dw err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in report["runs"]:
        print(f"| {r['rows']} | {r['method']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
              f"{r['peak_mb']:,.0f} | {r['loss_diff']:.1e} | {r['dh_err']:.1e} | "
              f"{r['dw_err']:.1e} |")  # fmt: skip
    for name, why in report["skipped"].items():
        print(f"skipped: {name}: {why}")


if __name__ == "__main__":
    main()
