"""The λ selection every closed-form study runs (``pillm.core.ridge.select_lambda``): one
eigendecomposition of HᵀH shared by the λ curve, κ and a fallback, against the same selection with
separate decompositions (``ridge_path``, then ``solve_ridge`` with its own eigvalsh for κ), same
call. Prints seconds per selection (median of ``--repeats``), the ratio and the largest weight
difference, for each ``--size`` p,k (features, outputs) on the paper's 9-point relative grid.

    python benchmarks/ridge_select.py --size 1500,300 --size 2500,300            # CPU
    python benchmarks/ridge_select.py --device cuda --size 4881,784 --size 7169,3072
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.core.ridge import (  # noqa: E402
    GramStats,
    heldout_sse,
    ridge_path,
    select_lambda,
    solve_ridge,
)
from pillm.core.runtime import resolve_device, sync  # noqa: E402

GRID = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]  # x tr(HᵀH)/p, as the config


def statistics_of(p: int, k: int, n: int, device: str) -> tuple[GramStats, GramStats]:
    """Train and held-out statistics of GELU random features of correlated inputs."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, p, generator=g, device=device, dtype=torch.float64)
    mix = torch.randn(p, p, generator=g, device=device, dtype=torch.float64) / p**0.5
    h = torch.nn.functional.gelu(x @ mix)
    y = torch.randn(n, k, generator=g, device=device, dtype=torch.float64)
    cut = int(0.9 * n)
    out = []
    for rows in (slice(0, cut), slice(cut, n)):
        s = GramStats.zeros(p, k, device)
        s.update(h[rows], y[rows])
        out.append(s)
    return out[0], out[1]


def separate(train: GramStats, val: GramStats, lams: list[float]) -> torch.Tensor:
    """The selection with a decomposition per step (the code before one was shared)."""
    sses = [float(heldout_sse(w, val).sum()) for w in ridge_path(train, lams)]
    best = lams[min(range(len(sses)), key=sses.__getitem__)]
    return solve_ridge(train, lam=best).weight


METHODS = {  # how -> (train, val, λs) -> weights
    "shared": lambda train, val, lams: select_lambda(train, val, lams)[0].weight,
    "separate": separate,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", action="append", help="p,k (repeatable; default 1500,300)")
    ap.add_argument("--rows", type=int, default=0, help="rows (default 2 p)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"# {name}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{'p':>6s} {'k':>6s} {'shared s':>9s} {'separate s':>10s} {'ratio':>6s} {'max |dW|':>9s}"
    )
    for size in args.size or ["1500,300"]:
        p, k = (int(v) for v in size.split(","))
        train, val = statistics_of(p, k, args.rows or 2 * p, device)
        lams = [r * float(torch.trace(train.hth)) / p for r in GRID]
        times: dict[str, list[float]] = {"shared": [], "separate": []}
        weights = {}
        for _ in range(args.repeats):
            for how, fn in METHODS.items():
                sync(device)
                t0 = time.perf_counter()
                weights[how] = fn(train, val, lams)
                sync(device)
                times[how].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[h]) for h in ("shared", "separate"))
        diff = float((weights["shared"] - weights["separate"]).abs().max())
        print(f"{p:6d} {k:6d} {a:9.3f} {b:10.3f} {b / a:5.2f}x {diff:9.2e}", flush=True)


if __name__ == "__main__":
    main()
