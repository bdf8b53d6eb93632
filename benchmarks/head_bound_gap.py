"""How far trained models' logits lie below the bound the fused head's softmax pass starts from.

``pillm.lm.fused_ce_kernels.softmax_pass`` takes each row's exponents from m = |h| max_v |w_v|
less HEADROOM instead of a running maximum, and redoes a block of rows with the running maximum
where a row's largest logit lies more than HEADROOM - ln FLOOR below that bound (the fast path
is then lost for that block, not the result). This prints, for each run folder's ``model.pt``,
the gap bound - max_v h·w_v over the held-out rows (quantiles) and the share of the pass's row
blocks (``Blocks.dx_m`` rows) that would fall back. Run on the GPU host after a build:

    python benchmarks/head_bound_gap.py --tokens results/paper/tokens/wikitext2 \\
        results/paper/lm/*/seed0
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch

from pillm.models.checkpoint import load_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders holding model.pt")
    ap.add_argument("--tokens", required=True, help="tokens folder with valid.npy (or test.npy)")
    ap.add_argument("--rows", type=int, default=32768, help="held-out rows scored")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    from pillm.lm import fused_ce, fused_ce_kernels

    # a row falls back where exp(max logit - m) < FLOOR, m = bound - HEADROOM
    fallback_gap = fused_ce_kernels.HEADROOM.value - math.log(fused_ce_kernels.FLOOR.value)
    block = fused_ce.BLOCKS.dx_m  # rows a program of the pass falls back together
    split = next(
        p for p in (Path(args.tokens) / n for n in ("valid.npy", "test.npy")) if p.exists()
    )
    ids = torch.from_numpy(np.load(split).astype(np.int64))
    print(f"# {split}; fallback where bound - max logit > {fallback_gap:.0f}")
    print("run | rows | gap p0 | p50 | p99 | max | blocks falling back")
    for run in args.runs:
        path = Path(run) / "model.pt"
        if not path.exists():
            print(f"{run} | no model.pt")
            continue
        model = load_checkpoint(path, args.device).eval()
        ctx = model.cfg.context
        n = min(args.rows // ctx, (len(ids) - 1) // ctx)
        x = ids[: n * ctx].view(n, ctx).to(args.device)
        gaps = []
        with torch.no_grad():
            w = model.lm_head.weight.float()
            w_max = torch.linalg.vector_norm(w, dim=1).amax()
            for chunk in x.split(32):
                h = model.hidden(chunk).float().flatten(0, 1)
                top = (h @ w.T).amax(1)
                gaps.append(torch.linalg.vector_norm(h, dim=1) * w_max - top)
        gap = torch.cat(gaps).cpu()
        rows = gap.numel() - gap.numel() % block
        blocks = (gap[:rows].view(-1, block) > fallback_gap).any(1).float().mean().item()
        q = torch.quantile(gap, torch.tensor([0.0, 0.5, 0.99, 1.0])).tolist()
        print(f"{run} | {gap.numel()} | " + " | ".join(f"{v:.1f}" for v in q) + f" | {blocks:.1%}")


if __name__ == "__main__":
    main()
