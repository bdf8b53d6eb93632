"""SAFFU's weight update at the paper shape on CUDA: ``adamw_step`` (the pipeline's update: the
weight gradient summed inside the AdamW update, never stored; pillm.saffu.kernels.segment_sum) against
the reference, the fixed-order gradient stored and then torch's fused AdamW.

The rows' inputs are drawn from a Zipf law over the inputs (rank r with weight 1 / (r + 1)), so
that frequent inputs collect long entry lists as the corpus's do (the "other" type and the most
frequent words). Both sides take the same logits' gradient G; the times exclude the forward and
the loss. ``adamw_step`` runs at each chunk length, column block and warp count given, and each
result is compared with the reference's weights after one step; also the forward ``X W`` by the
same kernel (``weighted_rows``), and the update's floor: the kernel with no gradient entries, W
and its moments read and written once. Prints one line per batch and setting and writes JSON with
``--out``. On a CPU it runs under ``TRITON_INTERPRET=1`` only (tests/saffu/test_saffu_cuda.py).

    python benchmarks/row_adamw.py --batch 1024 --batch 4096 --chunk 64 --block-v 512
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.accel.kernels import uses_kernels  # noqa: E402
from pillm.core.runtime import sync  # noqa: E402
from pillm.saffu.kernels.segment_sum import (  # noqa: E402
    ADAMW_BLOCK_V,
    ADAMW_CHUNK,
    ADAMW_WARPS,
    AdamWScalars,
    adamw_step,
    segment_weight_grad,
    weighted_rows,
)


def timed(fn, device: torch.device, repeats: int, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` (CUDA-synchronised on a GPU)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return sorted(out)[len(out) // 2]


def zipf_rows(b: int, n_in: int, k: int, device: torch.device, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    p = 1.0 / torch.arange(1, n_in + 1, dtype=torch.float64)
    idx = torch.multinomial(p, b * k, replacement=True, generator=g).view(b, k)
    wts = torch.rand(b, k, generator=g)
    return idx.to(device), (wts / wts.sum(1, keepdim=True)).to(device)


def update_only(w, m, v, sc: AdamWScalars) -> None:
    """``adamw_step``'s kernel with every input's entry and partial ranges empty: a zero
    gradient, so only W and its moments cross memory, once each way (the step's floor)."""
    from pillm.saffu.kernels.segment_kernels import adamw_rows_kernel

    n_in, vocab = w.shape
    none = torch.zeros(n_in, dtype=torch.int64, device=w.device)
    adamw_rows_kernel[(n_in, -(-vocab // ADAMW_BLOCK_V))](
        w, none, w, none, none, w, none, none, w, m, v, vocab, sc.decay, sc.beta1, sc.beta2,
        sc.eps, sc.step_size, sc.bc2_sqrt, BV=ADAMW_BLOCK_V, num_warps=ADAMW_WARPS,
    )  # fmt: skip


def time_batch(bs: int, w0: torch.Tensor, args, name: str) -> dict:
    """The reference and ``adamw_step`` at each setting, at batch ``bs`` (module docstring)."""
    n_in, vocab = w0.shape
    dev = w0.device
    sc = AdamWScalars.at(1e-3, (0.9, 0.99), 1e-8, 0.0, 1)
    idx, wts = zipf_rows(bs, n_in, args.nnz, dev)
    grad = torch.randn(bs, vocab, device=dev) / bs
    ref = w0.clone().requires_grad_()

    def reference(opt):
        ref.grad = segment_weight_grad(idx, wts, grad, n_in)
        opt.step()

    def adamw():
        return torch.optim.AdamW([ref], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0,
                                 fused=dev.type == "cuda")  # fmt: skip

    opt = adamw()
    ref_ms = timed(lambda: reference(opt), dev, args.repeats)
    opt_ms = timed(opt.step, dev, args.repeats)
    ref.data.copy_(w0)  # one step from w0, for the comparison
    reference(adamw())
    longest = int(torch.bincount(idx.flatten(), minlength=n_in).max())
    row = {"batch": bs, "longest_input_entries": longest, "reference_ms": ref_ms,
           "torch_adamw_alone_ms": opt_ms}  # fmt: skip
    print(f"{name} batch {bs} (longest input {longest} entries): gradient + torch fused "
          f"AdamW {ref_ms:.3f} ms (AdamW alone {opt_ms:.3f})")  # fmt: skip
    for chunk, bv, warps in itertools.product(args.chunk or [ADAMW_CHUNK], args.block_v or [ADAMW_BLOCK_V],
                                              args.warps or [ADAMW_WARPS]):  # fmt: skip
        w, m, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)

        def step(chunk=chunk, bv=bv, warps=warps, w=w, m=m, v=v):
            adamw_step(idx, wts, grad, w, m, v, sc, chunk=chunk, block_v=bv, num_warps=warps)

        step()
        err = float((w - ref.detach()).abs().max())
        ms = timed(step, dev, args.repeats)
        key = f"adamw_step_chunk{chunk}_bv{bv}_w{warps}"
        row[f"{key}_ms"], row[f"{key}_max_abs_diff"] = ms, err
        print(f"  adamw_step chunk {chunk} block {bv} warps {warps}: {ms:.3f} ms "
              f"({ref_ms / ms:.2f}x), max |w - reference| {err:.2e}")  # fmt: skip
    w, m, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)
    ms = timed(lambda: update_only(w, m, v, sc), dev, args.repeats)
    row["update_only_ms"] = ms
    print(f"  the update alone (no gradient entries: W and its moments read and written once): "
          f"{ms:.3f} ms")  # fmt: skip
    ms = timed(lambda: weighted_rows(idx, wts, w0), dev, args.repeats)  # the forward, same kernel
    row["forward_ms"] = ms
    print(f"  forward X W (weighted_rows): {ms:.3f} ms")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cpu: under TRITON_INTERPRET=1 (tests)")
    ap.add_argument("--n-in", type=int, default=4098)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--chunk", type=int, action="append", help="entries a program adds at most")
    ap.add_argument("--block-v", type=int, action="append")
    ap.add_argument("--warps", type=int, action="append")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)  # the weights and gradients (the rows: zipf_rows's own seed)
    if not uses_kernels(dev):
        sys.exit(f"row_adamw.py: the kernels do not run on {dev} (a GPU, or TRITON_INTERPRET=1)")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (Triton interpreter)"
    w0 = torch.randn(args.n_in, args.vocab, device=dev) * 0.02
    results: dict = {"device": name, "n_in": args.n_in, "vocab": args.vocab, "nnz": args.nnz,
                     "rows": []}  # fmt: skip
    for bs in args.batch or [1024]:
        results["rows"].append(time_batch(bs, w0, args, name))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
