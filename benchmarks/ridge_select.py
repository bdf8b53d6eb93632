"""The λ selection every closed-form study runs (``pillm.core.ridge.select_lambda``): one
eigendecomposition of HᵀH shared by the λ curve, κ and a fallback, against the same selection with
separate decompositions (``ridge_path``, then ``solve_ridge`` with its own eigvalsh for κ), and
against a Cholesky solve per λ with κ from the eigenvalues alone (``cholesky``: no
eigenvectors; where a factorisation fails that λ is skipped), same call. Prints seconds per
selection (median of ``--repeats``), each ratio to ``shared``, the largest weight difference
from ``shared`` and whether every way picked the same λ, for each ``--size`` p,k (features,
outputs) on the paper's 9-point relative grid; ``--parts`` adds each decomposition's own time,
per CUDA linalg library (cuSOLVER, MAGMA).

On an idle H200 one selection takes 0.2-0.8 s at the PIL generative fits' p, and the
``cholesky`` way is 1.11-1.19x slower than ``shared`` (docs/performance.md).

    python benchmarks/ridge_select.py --size 1500,300 --size 2500,300            # CPU
    python benchmarks/ridge_select.py --device cuda --size 4881,784 --size 7169,3072
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
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


def separate(train: GramStats, val: GramStats, lams: list[float]) -> tuple[torch.Tensor, float]:
    """The selection with a decomposition per step (the code before one was shared)."""
    sses = [float(heldout_sse(w, val).sum()) for w in ridge_path(train, lams)]
    best = lams[min(range(len(sses)), key=sses.__getitem__)]
    return solve_ridge(train, lam=best).weight, best


def cholesky(train: GramStats, val: GramStats, lams: list[float]) -> tuple[torch.Tensor, float]:
    """The curve from one Cholesky solve per λ (a λ whose factorisation fails is skipped) and
    the eigenvalues alone for κ, which solve_ridge records."""
    hth = train.hth
    eye = torch.eye(hth.shape[0], dtype=hth.dtype, device=hth.device)
    torch.linalg.eigvalsh(hth)  # κ = (s_max + λ) / (s_min + λ) of the pick, as recorded
    best, best_lam, best_sse = None, None, float("inf")
    for lam in lams:
        chol, info = torch.linalg.cholesky_ex(hth + lam * eye)
        if int(info) != 0:
            continue
        w = torch.cholesky_solve(train.hty, chol)
        sse = float(heldout_sse(w, val).sum())
        if sse < best_sse:
            best, best_lam, best_sse = w, lam, sse
    if best is None:
        raise RuntimeError("no λ of the grid gave a Cholesky factorisation")
    return best, best_lam


def shared(train: GramStats, val: GramStats, lams: list[float]) -> tuple[torch.Tensor, float]:
    sol = select_lambda(train, val, lams)[0]
    return sol.weight, sol.lam


METHODS = {  # how -> (train, val, λs) -> (weights, λ)
    "shared": shared,
    "separate": separate,
    "cholesky": cholesky,
}


def timed(fn, device: str) -> tuple[object, float]:
    """``fn()`` and its wall seconds, synchronised on a GPU."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def decompositions(train: GramStats, lams: list[float], device: str, repeats: int) -> str:
    """Seconds of each O(p³) step alone (median of ``repeats``), per CUDA linalg library: what
    a selection is made of (``eigh`` once, or ``eigvalsh`` once and a Cholesky per λ)."""
    hth = (train.hth + train.hth.T) / 2
    eye = torch.eye(hth.shape[0], dtype=hth.dtype, device=hth.device)
    steps = {
        "eigh": lambda: torch.linalg.eigh(hth),
        "eigvalsh": lambda: torch.linalg.eigvalsh(hth),
        "chol/λ": lambda: torch.cholesky_solve(
            train.hty, torch.linalg.cholesky_ex(hth + lams[4] * eye)[0]
        ),
    }
    libraries = ["default", "cusolver", "magma"] if device.startswith("cuda") else ["default"]
    out = []
    for lib in libraries:
        if lib != "default":
            torch.backends.cuda.preferred_linalg_library(lib)
        row = f"  {lib:>9s}"
        for name, step in steps.items():
            median = statistics.median(timed(step, device)[1] for _ in range(repeats))
            row += f" {name} {median:7.3f} s"
        out.append(row)
    if device.startswith("cuda"):
        torch.backends.cuda.preferred_linalg_library("default")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", action="append", help="p,k (repeatable; default 1500,300)")
    ap.add_argument("--rows", type=int, default=0, help="rows (default 2 p)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--parts", action="store_true", help="also time each decomposition alone")
    args = ap.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"# {name}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    others = [h for h in METHODS if h != "shared"]
    head = f"{'p':>6s} {'k':>6s} {'shared s':>9s}"
    for h in others:
        head += f" {h + ' s':>10s} {'ratio':>6s} {'max |dW|':>9s}"
    print(head + "  same λ")
    for size in args.size or ["1500,300"]:
        p, k = (int(v) for v in size.split(","))
        train, val = statistics_of(p, k, args.rows or 2 * p, device)
        lams = [r * float(torch.trace(train.hth)) / p for r in GRID]
        times: dict[str, list[float]] = {h: [] for h in METHODS}
        picks = {}
        for _ in range(args.repeats):
            for how, fn in METHODS.items():
                picks[how], secs = timed(partial(fn, train, val, lams), device)
                times[how].append(secs)
        ref = statistics.median(times["shared"])
        row = f"{p:6d} {k:6d} {ref:9.3f}"
        for h in others:
            t = statistics.median(times[h])
            diff = float((picks[h][0] - picks["shared"][0]).abs().max())
            row += f" {t:10.3f} {t / ref:5.2f}x {diff:9.2e}"
        same = len({lam for _, lam in picks.values()}) == 1
        print(f"{row}  {'yes' if same else 'no'}", flush=True)
        if args.parts:
            print(decompositions(train, lams, device, args.repeats), flush=True)


if __name__ == "__main__":
    main()
