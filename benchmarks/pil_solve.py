"""Benchmark: the full layer-wise PIL fit at the paper shape, and its Gram throughput.

Prints, for two corpus sizes: the wall time of solving every FFN layer (features, float64 Gram
streaming over train + held-out rows, λ selection, solve), the achieved float64 Gram FLOP/s, a
plain float64 matmul of the same shape measured in the same process (the reference), and peak
GPU memory (which must not grow with the number of tokens: only Gram matrices are kept).

    python benchmarks/pil_solve.py                 # paper shape from config/config.yaml
    python benchmarks/pil_solve.py --quick         # tiny, for a CPU check
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from pillm.core.ridge import GramStats
from pillm.core.runtime import sync
from pillm.lm.config import PILConfig
from pillm.lm.pil import solve_all_layers, target_propagation
from pillm.models.gpt import FEATURES, GPT, GPTConfig, attach_pil

SEED_OUTLINE_SECONDS = 8.3  # the seed outline's "PIL-LM (Pure)" time in its Table 1


def timed(fn, device: str, repeat: int = 1) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeat


def matmul_reference(rows: int, p: int, device: str, repeat: int) -> float:
    """FLOP/s of a plain float64 HᵀH for an (rows, p) chunk: the ceiling for Gram streaming."""
    h = torch.randn(rows, p, dtype=torch.float64, device=device)
    timed(lambda: h.T @ h, device)  # warm-up
    return 2 * rows * p * p / timed(lambda: h.T @ h, device, repeat)


def gram_only(rows: int, p: int, d: int, device: str, repeat: int) -> float:
    """FLOP/s of GramStats.update on float32 chunks (cast + HᵀH + HᵀY), as the fit streams them."""
    h = torch.randn(rows, p, device=device)
    y = torch.randn(rows, d, device=device)
    stats = GramStats.zeros(p, d, device=device)
    timed(lambda: stats.update(h, y), device)
    return 2 * rows * (p * p + p * d) / timed(lambda: stats.update(h, y), device, repeat)


def full_fit(model_cfg: dict, pil_cfg: PILConfig, vocab: int, n_tokens: int, device: str) -> dict:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab, **model_cfg, use_ffn=False)
    model = GPT(cfg).to(device).eval()
    attach_pil(model, "bi", seed=0)
    g = torch.Generator().manual_seed(1)
    train = torch.randint(0, vocab, (n_tokens,), generator=g)
    valid = torch.randint(0, vocab, (max(cfg.context + 1, n_tokens // 9),), generator=g)
    # Warm-up (CUDA context, cuBLAS/cuSOLVER handles, allocator) on a slice, then reset the model.
    solve_all_layers(
        model,
        target_propagation,
        train[: 4 * cfg.context * pil_cfg.batch_size],
        valid[: 2 * cfg.context * pil_cfg.batch_size],
        pil_cfg,
        device,
    )
    attach_pil(model, "bi", seed=0)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    fits = solve_all_layers(model, target_propagation, train, valid, pil_cfg, device).fits
    sync(device)
    seconds = time.perf_counter() - t0
    p = model.blocks[0].mlp.n_features
    rows = (len(train) // cfg.context + len(valid) // cfg.context) * cfg.context  # streamed rows
    flops = cfg.n_layer * 2 * rows * (p * p + p * cfg.d_model)
    return {
        "tokens": n_tokens,
        "fit_seconds": seconds,
        "per_layer_seconds": [round(f.gram_seconds + f.solve_seconds, 3) for f in fits],
        "gram_seconds": sum(f.gram_seconds for f in fits),
        "gram_flops_per_s_in_fit": flops / sum(f.gram_seconds for f in fits),
        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20
        if device.startswith("cuda")
        else None,
        "kappa_max": max(f.kappa for f in fits),
        "solvers": sorted({f.solver for f in fits}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (CPU check)")
    ap.add_argument("--tokens", type=int, nargs=2, default=[232_000, 928_000])
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    ap.add_argument(
        "--batch-size", type=int, default=0, help="override pil.batch_size (sequences per chunk)"
    )
    args = ap.parse_args()
    cfg = yaml.safe_load(Path(args.config).read_text())
    model_cfg, pil_cfg = dict(cfg["model"]), PILConfig.from_dict(cfg["pil"], "pil")
    pil_cfg = replace(pil_cfg, max_tokens=0)
    if args.batch_size:
        pil_cfg = replace(pil_cfg, batch_size=args.batch_size)
    vocab = 50257
    if args.quick:
        model_cfg |= {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32}
        vocab, args.tokens = 512, [8_000, 32_000]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    d = model_cfg["d_model"]
    n_proj, mult = FEATURES["bi"]
    p = n_proj * mult * d + 1
    rows = pil_cfg.batch_size * model_cfg["context"]  # one streamed chunk
    repeat = 3 if args.quick else 20
    ref = matmul_reference(rows, p, device, repeat)
    gram = gram_only(rows, p, d, device, repeat)
    fits = [full_fit(model_cfg, pil_cfg, vocab, n, device) for n in args.tokens]
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    report = {
        "device": name,
        "torch": torch.__version__,
        "shape": {**model_cfg, "p": p, "chunk_rows": rows},
        "float64_matmul_flops_per_s": ref,
        "gram_update_flops_per_s": gram,
        "fits": fits,
    }
    print(f"device: {name}  (torch {torch.__version__})")
    print(f"shape: {model_cfg['n_layer']} layers, d={d}, Bi-PIL features p={p}, chunk {rows} rows")
    print(f"float64 matmul HᵀH (reference):  {ref / 1e12:8.3f} TFLOP/s")
    print(
        f"GramStats.update (fp32 in, fp64): {gram / 1e12:8.3f} TFLOP/s  = {100 * gram / ref:5.1f}% of reference"
    )
    for f in fits:
        mem = f"{f['peak_gpu_mib']:.0f} MiB" if f["peak_gpu_mib"] is not None else "n/a (CPU)"
        print(
            f"full fit, {f['tokens']:>9,} train tokens: {f['fit_seconds']:7.2f} s "
            f"(seed outline: {SEED_OUTLINE_SECONDS} s; ratio {SEED_OUTLINE_SECONDS / f['fit_seconds']:.1f}x)  "
            f"Gram streaming {f['gram_seconds']:.2f} s at {f['gram_flops_per_s_in_fit'] / 1e12:.3f} TFLOP/s "
            f"({100 * f['gram_flops_per_s_in_fit'] / ref:.1f}% of reference)  peak {mem}  "
            f"per layer {f['per_layer_seconds']}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
