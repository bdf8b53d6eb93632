"""The output-layer AdamW arm (``pillm.generative.adamw_out``) with and without its anneal, on a
flow-matching problem small enough for a CPU: the closed form's held-out MSE, then per
``--anneal`` value the rate the grid picks, its best held-out MSE, its passes, and every grid
rate's best held-out MSE and passes.

    python benchmarks/adamw_out_anneal.py --data ../shared/data --anneal 0 --anneal 10

Why: without an anneal the flat rule stops AdamW on its noise floor, which grows with the rate,
with the rate still near its peak; the anneal lowers the rate first. The grid, batch, warm-up
and flat rule are the paper config's (``generative.adamw_out``, ``generative.gradient``); the
problem is smaller (``--images`` MNIST training images, the next ``--heldout`` held out, feature
width ``--width``). ``--tiny``: a toy mixture instead of MNIST, for a test of the script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.generative.adamw_out import AdamwOutConfig, fit_adamw_out  # noqa: E402
from pillm.generative.features import FeatureConfig  # noqa: E402
from pillm.generative.flow import FlowConfig, fit_pil_flow, flow_heldout_mse  # noqa: E402


def images(args) -> tuple[torch.Tensor, torch.Tensor]:
    """(fit, held-out) images: MNIST's first rows of a seeded subset, or a toy mixture."""
    if args.tiny:
        g = torch.Generator().manual_seed(0)
        centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
        x = centers[torch.randint(4, (600,), generator=g)] + 0.3 * torch.randn(600, 2, generator=g)
        return x[:500], x[500:]
    from pillm.data.images import load_images_local

    n = args.images + args.heldout
    d = load_images_local("mnist", "train", args.data, limit=n, subset_seed=0)
    return d.x[: args.images], d.x[args.images : n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="the offline data mirror")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--heldout", type=int, default=500)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--anneal", type=int, action="append", help="anneal_epochs (repeatable)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="a toy mixture, few passes")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    x, x_val = images(args)
    fcfg = FlowConfig(FeatureConfig(width=32 if args.tiny else args.width), pairs_per_image=4,
                      chunk_size=4096)  # fmt: skip
    pil, _ = fit_pil_flow(x, fcfg, seed=0, x_val=x_val)

    def heldout(model) -> float:
        return flow_heldout_mse(model, x_val, seed=0, pairs_per_image=4)

    pil_mse = heldout(pil)
    print(f"{len(x)} fit images, {len(x_val)} held out, width {fcfg.features.width}: "
          f"PIL held-out MSE {pil_mse:.5f}")  # fmt: skip
    rows = []
    for anneal in args.anneal or [0, 10]:
        cfg = AdamwOutConfig(
            lr_grid=(1e-4, 3e-4, 1e-3, 3e-3), lr_extend=0, max_epochs=150, batch_size=512,
            warmup=100, flat_evals=5, flat_tol=0.001, trained_drop=0.1, anneal_epochs=anneal,
        )
        if args.tiny:  # a few steps a pass: a short warm-up, a looser flat rule
            cfg = replace(cfg, lr_grid=(1e-2, 3e-2), batch_size=64, warmup=5, max_epochs=60,
                          flat_evals=3, flat_tol=0.01)  # fmt: skip
        t0 = time.perf_counter()
        _, m, curve = fit_adamw_out(fcfg, cfg, x, 0, "cpu", heldout)
        seconds = time.perf_counter() - t0
        grid: dict[float, list[float]] = {}
        for c in curve:
            if c["curve"] == "adamw_out_grid":
                grid.setdefault(c["lr"], []).append(c["y"])
        kept = min(c["y"] for c in curve if c["curve"] == "adamw_out_heldout")
        rows.append({
            "anneal_epochs": anneal, "pick": m["adamw_lr"], "best": kept, "pil": pil_mse,
            "gap_percent": 100 * (kept - pil_mse) / pil_mse, "passes": m["epochs_run"],
            "anneal_from": m["anneal_from_epoch"], "seconds": seconds,
            "grid": {f"{lr:g}": {"best": min(v), "passes": len(v)} for lr, v in sorted(grid.items())},
        })  # fmt: skip
        r = rows[-1]
        print(f"anneal {anneal:>3}: pick {r['pick']:g}, best {r['best']:.5f} "
              f"(+{r['gap_percent']:.2f} % over PIL), {r['passes']:.0f} passes "
              f"(anneal from {r['anneal_from']:.0f}), grid in {seconds:.0f} s")  # fmt: skip
        print("   grid best (passes): " + ", ".join(
            f"{lr} {g['best']:.5f} ({g['passes']})" for lr, g in r["grid"].items()))  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
