"""Benchmark: the probe's swap metric (``pillm.probe.run.SwapMetric``), each block swapped for a
linear map, with the blocks below the swap replayed from the intact pass (``swapped``, what the
probe runs) against a whole forward per swap (the code before), same process, same replacements.

Prints, per ``--windows`` count (the swap metric's batch of windows): the seconds of all swaps
each way, their ratio and whether every metric value is the same float (it must be: the replayed
blocks' outputs are the intact model's). Token ids are random: the cost does not depend on text.

    python benchmarks/probe_swap.py --model smollm2 --windows 4 --windows 16          # CPU
    python benchmarks/probe_swap.py --model smollm2 --device cuda --windows 64 --windows 256
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from pillm.core.runtime import resolve_device, sync
from pillm.models.pretrained import load_probe_model
from pillm.probe.fit import ffn_modules, swap_ffns
from pillm.probe.run import SwapMetric


def vocab_size(model: nn.Module) -> int:
    return model.get_input_embeddings().weight.shape[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a PyPI probe model: smollm2 or minilm")
    ap.add_argument("--windows", type=int, action="append", help="windows (repeatable; 4)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16, help="windows per forward")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = resolve_device(args.device)
    t0 = time.perf_counter()
    pm = load_probe_model(args.model, {})
    pm.model.to(device)
    if pm.kind == "encoder":  # the probe's proxy reads last_hidden_state
        pm.model = getattr(pm.model, "base_model", pm.model)
    blocks = ffn_modules(pm.model)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"# {pm.label} ({len(blocks)} blocks), {name}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, loaded in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    print(f"{'windows':>8s} {'tokens':>7s} {'whole s':>8s} {'replayed s':>10s} {'ratio':>6s}  same")
    d = pm.model.config.hidden_size
    for n in args.windows or [4]:
        g = torch.Generator().manual_seed(n)
        ids = torch.randint(0, vocab_size(pm.model), (n, args.seq_len), generator=g)
        metric = SwapMetric(pm, list(ids.split(args.batch_size)), device)
        whole_s = replayed_s = 0.0
        same = True
        for layer in range(len(blocks)):
            torch.manual_seed(layer)
            repl = nn.Linear(d, d).to(device)
            sync(device)
            t = time.perf_counter()
            with swap_ffns(pm.model, {layer: repl}):
                whole = metric()
            sync(device)
            whole_s += time.perf_counter() - t
            t = time.perf_counter()
            replayed = metric.swapped(layer, repl)
            sync(device)
            replayed_s += time.perf_counter() - t
            same &= whole == replayed
        print(f"{n:8d} {n * args.seq_len:7d} {whole_s:8.2f} {replayed_s:10.2f} "
              f"{whole_s / replayed_s:5.2f}x  {'yes' if same else 'NO'}", flush=True)  # fmt: skip
        if not same:
            raise SystemExit("a replayed swap differs from the whole forward")


if __name__ == "__main__":
    main()
