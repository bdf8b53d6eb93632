"""Where a SAFFU training step spends its time, at the paper shape, on one device.

The paper's main setting trains W (4,098 inputs x 50,257 output types, 206 M weights) by AdamW
on sparse non-negative rows (16 + 4 non-zeros each). This times, each alone and repeated
(CUDA-synchronised, first repeats dropped): the forward, forward + backward, the optimizer step,
the whole step and one held-out evaluation chunk, with the product x W computed by
``embedding_bag`` (``bag``), by two cuSPARSE products (``csr``,
``pillm.saffu.model.SparseRowsTimesW``), with ``embedding_bag``'s backward (``csr_bag``) or
the fixed-order gradient (``csr_fixed``: cuSPARSE's forward, the fixed-order backward),
and as SaffuLM computes it (``fixed``: forward and gradient by the fixed-order kernel of
``pillm.saffu.kernels.segment_sum``); the largest logit deviation of the model's product and gradient
deviation of cuSPARSE's from ``embedding_bag``'s; and the step with the rows scattered into a
dense (batch x inputs) matrix and multiplied (TF32 allowed, fp32 off). Where the Triton kernels
run, also the pipeline's step, ``RowAdamW`` (``pillm.saffu.optim``: the loss and the logits'
gradient by one fused pass, ``pillm.saffu.kernels.softmax_loss``; the weight gradient summed inside the
AdamW update, never stored), that fused pass against the ``fixed`` forward with torch's
``cross_entropy`` and autograd (``fused_`` and ``torch_loss_logit_grad_ms``), and the held-out
chunk by the fused pass, which never stores the logits (``fused_softmax_eval_chunk_ms``).
``--profile`` prints each product's top kernels, and the pipeline step's.
Prints one table per batch size and writes JSON with ``--out``.

    python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.accel.kernels import uses_kernels  # noqa: E402
from pillm.core.runtime import kernel_profile  # noqa: E402
from pillm.saffu.kernels.segment_sum import bag_weight_grad  # noqa: E402
from pillm.saffu.kernels.softmax_loss import loss_and_logit_grad, softmax_rows  # noqa: E402
from pillm.saffu.model import SaffuLM, SparseRowsFixedOrder, SparseRowsTimesW  # noqa: E402
from pillm.saffu.optim import RowAdamW  # noqa: E402


def timed(fn, device: str, repeats: int, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return sorted(out)[len(out) // 2]


def rows(n: int, n_in: int, nnz: int, vocab: int, device: str):
    g = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(0, n_in, (n, nnz), generator=g).to(device)
    wts = torch.full((n, nnz), 1.0 / nnz, device=device)
    y = torch.randint(0, vocab, (n,), generator=g).to(device)
    return idx, wts, y


def bag(idx, wts, weight):
    """The product as ``embedding_bag`` computes it (the CPU path, and CUDA's before the
    sparse products)."""
    return F.embedding_bag(idx, weight, per_sample_weights=wts, mode="sum")


class CsrBagGrad(SparseRowsTimesW):
    """The CSR forward with ``embedding_bag``'s sorted backward as the weight gradient."""

    @staticmethod
    def backward(ctx, grad):
        idx, wts = ctx.saved_tensors
        return None, None, bag_weight_grad(idx, wts, grad, ctx.n_in)


class CsrFixedGrad(SparseRowsTimesW):
    """cuSPARSE's forward with the fixed-order weight gradient (SaffuLM's forward is the
    fixed-order kernel's too)."""

    @staticmethod
    def backward(ctx, grad):
        return SparseRowsFixedOrder.backward(ctx, grad)


# csr: two cuSPARSE products (reruns differ); csr_bag: embedding_bag's backward; csr_fixed:
# cuSPARSE's forward, the fixed-order gradient (pillm.saffu.kernels.segment_sum); fixed: SaffuLM's CUDA
# path, both fixed-order (embedding_bag's forward where the kernels do not run); the last three
# rerun bit for bit
PRODUCTS = {"bag": bag, "csr": SparseRowsTimesW.apply, "csr_bag": CsrBagGrad.apply,
            "csr_fixed": CsrFixedGrad.apply, "fixed": SparseRowsFixedOrder.apply}  # fmt: skip


def time_batch(model: SaffuLM, opt: torch.optim.Optimizer, bs: int, args) -> dict:
    """Milliseconds of each part of a step at batch ``bs`` (see the module docstring), for
    each product of ``PRODUCTS``, and the sparse product's deviation from ``embedding_bag``."""
    dev = args.device
    idx, wts, y = rows(bs, args.n_in, args.nnz, args.vocab, dev)
    r: dict = {"batch": bs}
    for name, product in PRODUCTS.items():

        def forward(product=product):
            return F.cross_entropy(product(idx, wts, model.weight).float(), y)

        def fwd_bwd(forward=forward):
            opt.zero_grad(set_to_none=True)
            forward().backward()

        def step(fwd_bwd=fwd_bwd):
            fwd_bwd()
            opt.step()

        fwd_bwd()
        if args.profile:
            step()
            with kernel_profile(dev, f"batch {bs}, {name} step, 10 calls"):
                for _ in range(10):
                    step()
        r[f"{name}_forward_ms"] = timed(forward, dev, args.repeats)
        r[f"{name}_forward_backward_ms"] = timed(fwd_bwd, dev, args.repeats)
        r[f"{name}_step_ms"] = timed(step, dev, args.repeats)
    r["optimizer_ms"] = timed(opt.step, dev, args.repeats)
    if uses_kernels(torch.device(dev)):

        def torch_loss_logit_grad():  # the loss and logits' gradient by torch, for comparison
            with torch.no_grad():
                logits = SparseRowsFixedOrder.apply(idx, wts, model.weight).float()
            logits.requires_grad_()
            return torch.autograd.grad(F.cross_entropy(logits, y), logits)

        r["torch_loss_logit_grad_ms"] = timed(torch_loss_logit_grad, dev, args.repeats)
        with torch.no_grad():
            r["fused_loss_logit_grad_ms"] = timed(
                lambda: loss_and_logit_grad(idx, wts, model.weight, y), dev, args.repeats
            )
        row = RowAdamW(model, (0.9, 0.99), 0.0)
        r["row_adamw_step_ms"] = timed(lambda: row.step(idx, wts, y, 1e-3), dev, args.repeats)
        if args.profile:
            with kernel_profile(dev, f"batch {bs}, the pipeline's step (RowAdamW), 10 calls"):
                for _ in range(10):
                    row.step(idx, wts, y, 1e-3)
        del row
    grads = []
    for product in (bag, SparseRowsTimesW.apply):
        w = model.weight.detach().clone().requires_grad_()
        F.cross_entropy(product(idx, wts, w), y).backward()
        grads.append(w.grad)
    with torch.no_grad():
        r["model_max_logit_error"] = (
            (bag(idx, wts, model.weight) - model(idx, wts)).abs().max().item()
        )
    r["csr_max_grad_error"] = (grads[0] - grads[1]).abs().max().item()

    def dense_logits():
        x = torch.zeros(bs, args.n_in, device=dev)
        x.scatter_add_(1, idx, wts)
        return x @ model.weight

    def dense_step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(dense_logits(), y).backward()
        opt.step()

    if dev.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        r["dense_tf32_step_ms"] = timed(dense_step, dev, args.repeats)
        with torch.no_grad():
            r["dense_tf32_max_logit_error"] = (dense_logits() - model(idx, wts)).abs().max().item()
        torch.backends.cuda.matmul.allow_tf32 = False
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n-in", type=int, default=4098)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--eval-chunk", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="print the top kernels of a step")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = args.device
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else "CPU"
    model = SaffuLM(args.n_in, args.vocab).to(dev)
    torch.nn.init.normal_(model.weight, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev.startswith("cuda"))
    results = {"device": name, "n_in": args.n_in, "vocab": args.vocab, "nnz": args.nnz, "rows": []}
    for bs in args.batch or [1024]:
        r = time_batch(model, opt, bs, args)
        results["rows"].append(r)
        print(f"batch {bs}: " + ", ".join(f"{k} {v:.3g}" for k, v in r.items() if k != "batch"))
    e_idx, e_wts, e_y = rows(args.eval_chunk, args.n_in, args.nnz, args.vocab, dev)
    with torch.no_grad():
        for key, product in PRODUCTS.items():
            results[f"{key}_eval_chunk_ms"] = timed(
                lambda product=product: F.cross_entropy(
                    product(e_idx, e_wts, model.weight), e_y, reduction="sum"
                ),
                dev,
                args.repeats,
            )
        if uses_kernels(torch.device(dev)):  # the pipeline's held-out chunk: logits never stored
            results["fused_softmax_eval_chunk_ms"] = timed(
                lambda: softmax_rows(e_idx, e_wts, model.weight, e_y).nll.sum(), dev, args.repeats
            )
    print(f"{name}: held-out chunk of {args.eval_chunk} rows, ms: "
          + ", ".join(f"{k.removesuffix('_eval_chunk_ms')} {v:.3g}" for k, v in results.items()
                      if k.endswith("_eval_chunk_ms")))  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
