"""An LM evaluation pass (``pillm.models.evaluate.evaluate_lm``) with its batch scores eager and
compiled, per model width, on one token split.

    python benchmarks/eval_speed.py --device cuda --tokens .gpu/tokens/wikitext2/valid.npy \
        --width 128 --width 256 --width 512 --width 768 --out eval_speed.json

Why: an LM run evaluates the validation split every ``train.eval_every`` steps and then the
validation and test splits; with a vocabulary of 50,304 at d = 256 the logits, not the matmuls,
set an evaluation's time, and the eager scores move each logit through memory several times
(float32 copy, log-softmax, argmax) where the compiled scores read it in one fused reduction.
Per width (a GPT of ``--layers`` layers, heads d/64, random weights: the time does not depend on
them) it prints the first compiled pass (compilation included), then ms per pass of each path
(median of ``--repeats`` after a warm-up), their ratio, tokens/s, and the two paths' differences
in mean loss and accuracy. Without ``--tokens`` it scores ``--n-tokens`` random tokens.
``--tiny``: small shapes on CPU with Dynamo's ``aot_eager`` backend (a smoke test of the script).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.core.runtime import resolve_device, sync  # noqa: E402
from pillm.models.evaluate import evaluate_lm  # noqa: E402
from pillm.models.gpt import GPT, GPTConfig  # noqa: E402


def timed(fn, device: str) -> tuple[float, dict]:
    """Seconds of one call of ``fn`` (device work included) and its result."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def bench_width(d: int, args, tokens: torch.Tensor, device: str) -> dict:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=args.vocab, context=args.context, n_layer=args.layers, d_model=d,
                    n_head=max(1, d // 64))  # fmt: skip
    model = GPT(cfg).to(device)
    amp = torch.bfloat16 if device.startswith("cuda") else None

    def run(compiled: bool) -> dict:
        return evaluate_lm(model, tokens, args.context, args.batch, 10**6, amp, compiled,
                           args.backend)  # fmt: skip

    first, _ = timed(lambda: run(True), device)  # compiles (or loads Inductor's cache)
    row = {"d_model": d, "tokens": int(len(tokens)), "first_compiled_s": first}
    results = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        run(compiled)  # warm-up: allocator, cuBLAS handles
        times = []
        for _ in range(args.repeats):
            sec, results[name] = timed(lambda c=compiled: run(c), device)
            times.append(sec)
        row[f"{name}_ms"] = 1e3 * statistics.median(times)
        row[f"{name}_tokens_per_s"] = len(tokens) / statistics.median(times)
    row["speedup"] = row["eager_ms"] / row["compiled_ms"]
    row["loss_diff"] = abs(results["eager"]["loss"] - results["compiled"]["loss"])
    row["acc_diff"] = abs(results["eager"]["acc"] - results["compiled"]["acc"])
    row["eager_loss"] = results["eager"]["loss"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--tokens", help="a token split (.npy); default: --n-tokens random tokens")
    p.add_argument("--n-tokens", type=int, default=217_646)  # WikiText-2's validation split
    p.add_argument("--width", type=int, action="append", help="d_model (repeatable)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50_304)
    p.add_argument(
        "--batch", type=int, default=64, help="windows per batch (train.eval_batch_size)"
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--tiny", action="store_true", help="small shapes, CPU, aot_eager")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()
    if args.tiny:
        args.vocab, args.n_tokens, args.batch, args.context = 300, 2_000, 4, 32
        args.width, args.layers, args.backend = args.width or [32, 64], 1, "aot_eager"
        args.repeats = min(args.repeats, 2)
    device = resolve_device("cpu" if args.tiny else args.device)
    if args.tokens:
        tokens = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    else:
        tokens = torch.randint(
            0, args.vocab, (args.n_tokens,), generator=torch.Generator().manual_seed(0)
        )
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"device {name}, {len(tokens)} tokens, batch {args.batch} x {args.context}, "
          f"vocab {args.vocab}, backend {args.backend}")  # fmt: skip
    rows = [bench_width(d, args, tokens, device) for d in args.width or [256]]
    print(f"{'d':>5} {'eager ms':>9} {'compiled ms':>12} {'speedup':>8} {'first s':>8} "
          f"{'Mtok/s':>7} {'|dloss|':>9} {'|dacc|':>8}")  # fmt: skip
    for r in rows:
        print(f"{r['d_model']:>5} {r['eager_ms']:>9.1f} {r['compiled_ms']:>12.1f} "
              f"{r['speedup']:>7.2f}x {r['first_compiled_s']:>8.1f} "
              f"{r['compiled_tokens_per_s'] / 1e6:>7.2f} {r['loss_diff']:>9.2e} "
              f"{r['acc_diff']:>8.1e}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
