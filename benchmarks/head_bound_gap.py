"""How far trained models' logits lie below the bound the fused head's softmax pass starts from.

``pillm.lm.kernels.fused_ce_kernels.softmax_pass`` takes each row's exponents from m = |h| max_v |w_v|
less HEADROOM instead of a running maximum, and redoes a block of rows with the running maximum
where a row's largest logit lies more than HEADROOM - ln FLOOR below that bound (the fast path
is then lost for that block, not the result). This prints, for each run folder's ``model.pt``,
the gap bound - max_v h·w_v over the held-out rows (quantiles) and the share of the pass's row
blocks (``Blocks.dx_m`` rows) that would fall back. Run on the GPU host after a build:

    python benchmarks/head_bound_gap.py --tokens results/paper/tokens/wikitext2 \\
        results/paper/lm/*/seed0

``--train-steps N`` instead trains the paper config's model for N steps (eagerly: no compile,
no CUDA graphs, so a forward hook sees the final hidden states each step) and prints the same
statistics for the training rows of every ``--every``-th step: how often blocks fall back while
a model learns, which a trained model does not show.
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
    ap.add_argument("runs", nargs="*", help="run folders holding model.pt")
    ap.add_argument("--tokens", required=True, help="tokens folder with valid.npy (or test.npy)")
    ap.add_argument("--rows", type=int, default=32768, help="held-out rows scored")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--train-steps",
        type=int,
        default=0,
        help="train the paper model this many steps and report its training rows",
    )
    ap.add_argument("--batch", type=int, default=256, help="with --train-steps: sequences a step")
    ap.add_argument("--every", type=int, default=10, help="with --train-steps: every k-th step")
    ap.add_argument("--config", default="config/config.yaml")
    args = ap.parse_args()
    from pillm.lm.kernels import fused_ce, fused_ce_kernels

    # a row falls back where exp(max logit - m) < FLOOR, m = bound - HEADROOM
    fallback_gap = fused_ce_kernels.HEADROOM.value - math.log(fused_ce_kernels.FLOOR.value)
    block = fused_ce.BLOCKS.dx_m  # rows a program of the pass falls back together
    if args.train_steps:
        during_training(args, fallback_gap, block)
        return
    if not args.runs:
        ap.error("give run folders holding model.pt, or --train-steps N")
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
        with torch.no_grad():
            w = model.lm_head.weight
            gaps = [bound_gap(model.hidden(chunk).flatten(0, 1), w) for chunk in x.split(32)]
        print(f"{run} | " + summary(torch.cat(gaps), fallback_gap, block)[0])


def bound_gap(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each row's logit bound |h| max_v |w_v| less its largest logit h·w_v, in float32."""
    h, w = h.float(), w.float()
    w_max = torch.linalg.vector_norm(w, dim=1).amax()
    top = torch.cat([(c @ w.T).amax(1) for c in h.split(4096)])
    return torch.linalg.vector_norm(h, dim=1) * w_max - top


def summary(gap: torch.Tensor, fallback_gap: float, block: int) -> tuple[str, float]:
    """'rows | p0 | p50 | p99 | max | share' of the gaps, and the share of blocks falling back."""
    gap = gap.float().cpu()
    # the pass's blocks of rows, the last one partial as in the kernel
    blocks = torch.stack([(b > fallback_gap).any() for b in gap.split(block)]).float().mean().item()
    q = torch.quantile(gap, torch.tensor([0.0, 0.5, 0.99, 1.0])).tolist()
    return f"{gap.numel()} | " + " | ".join(f"{v:.1f}" for v in q) + f" | {blocks:.1%}", blocks


def during_training(args, fallback_gap: float, block: int) -> None:
    """The gaps of the rows the head sees while the paper model trains (see the docstring): the
    final LayerNorm's output, read by a forward hook every ``--every``-th training step."""
    import yaml

    from pillm.data.corpus import load_tokens
    from pillm.lm.config import TrainConfig
    from pillm.lm.train import fit
    from pillm.models.gpt import GPT, GPTConfig

    cfg = yaml.safe_load(Path(args.config).read_text())
    arrays, meta = load_tokens(args.tokens)
    train = {**cfg["train"], "batch_size": args.batch, "max_steps": args.train_steps,
             "epochs": 1000, "eval_every": 0, "compile": False, "cuda_graphs": False}  # fmt: skip
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=meta["vocab_size"], **cfg["model"])).to(args.device)
    steps, shares = [0], []

    def watch(module, inputs, h):
        if not (module.training and torch.is_grad_enabled()):
            return
        steps[0] += 1
        if (steps[0] - 1) % args.every:
            return
        with torch.no_grad():
            gap = bound_gap(h.detach().flatten(0, -2), model.lm_head.weight.detach())
            line, share = summary(gap, fallback_gap, block)
        shares.append(share)
        print(f"step {steps[0]} | {line}", flush=True)

    model.ln_f.register_forward_hook(watch)
    print(f"# training rows, batch {args.batch}; fallback where bound - max logit > "
          f"{fallback_gap:.0f}")  # fmt: skip
    print("step | rows | gap p0 | p50 | p99 | max | blocks falling back")
    split = {k: arrays[k] for k in ("train", "valid", "test")}
    fit(model, split, meta, TrainConfig.from_dict(train, "train"), 0, args.device)
    print(f"blocks falling back over the {len(shares)} steps seen: "
          f"{sum(shares) / max(1, len(shares)):.1%} on average")  # fmt: skip


if __name__ == "__main__":
    main()
