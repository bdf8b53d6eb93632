"""Benchmark: R²_lin probe capture + fit throughput (rows/s) and its memory as rows grow.

For one model, at 1x and 4x the rows: the time to stream every FFN block's (input, output) rows
into float64 Gram statistics and solve each block's least-squares map (``probe.probe_model``,
linear probe only), a plain forward pass of the trunk (no LM head, as the probe runs it) over the
same windows measured in the same process (the reference: capture + fit cost / forward cost),
and peak memory during capture + fit (GPU: peak allocated; CPU: peak RSS growth over the
pre-capture RSS, sampled every 5 ms). Memory must not grow with the rows: only Gram matrices are
kept, never the rows. One warm-up probe on five batches runs before the timed ones.

    python benchmarks/probe_throughput.py --model smollm2 --rows 4096            # CPU
    python benchmarks/probe_throughput.py --model pillm --rows 65536 --device cuda \
        --checkpoint results/paper/lm/baseline/seed0/model.pt                       # own model
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import psutil
import torch
import yaml

from pillm.core.runtime import sync
from pillm.data.sources import load_corpus
from pillm.models.gpt import GPT
from pillm.models.pretrained import ProbeModel, load_probe_model
from pillm.probe.fit import probe_model
from pillm.probe.run import token_windows


class PeakRSS:
    """Peak resident memory growth (MiB) of this process while the block runs."""

    def __enter__(self) -> PeakRSS:
        self.proc, self.base, self.peak, self.stop = psutil.Process(), 0, 0, False
        self.base = self.peak = self.proc.memory_info().rss
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self) -> None:
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.thread.join()
        self.growth_mb = (self.peak - self.base) / 2**20


def own_model(checkpoint: str | None, device: str) -> ProbeModel:
    """The pipeline's baseline at the paper shape: a trained checkpoint, else random init."""
    from tokenizers import Tokenizer

    from pillm.data.tokenizer import encode, gpt2_tokenizer
    from pillm.models.gpt import GPTConfig

    if checkpoint:
        from pillm.models.checkpoint import load_checkpoint

        model, what = load_checkpoint(checkpoint, device), f"trained ({checkpoint})"
    else:
        cfg = yaml.safe_load(Path("config/config.yaml").read_text())["model"]
        torch.manual_seed(0)
        model, what = GPT(GPTConfig(vocab_size=50257, **cfg)).to(device), "random init"
    tok: Tokenizer = gpt2_tokenizer("local", args.data)
    if model.cfg.vocab_size != tok.get_vocab_size():
        raise SystemExit(f"--checkpoint {checkpoint}: vocabulary {model.cfg.vocab_size}, but this "
                         f"benchmark feeds GPT-2 BPE ids ({tok.get_vocab_size()}): pass a "
                         "checkpoint of a GPT-2 BPE config (the paper's, config/config.yaml)")  # fmt: skip
    return ProbeModel("pillm-s0", f"pillm baseline, {what}", "causal", model.eval(),
                      lambda t: encode(tok, t).astype("int64"))  # fmt: skip


def measure(pm: ProbeModel, text: str, rows: int, seq_len: int, batch: int, device: str) -> dict:
    """``batch`` windows per forward; every 5th batch held out, as in the probe rule."""
    win = token_windows(pm, text, seq_len, rows // seq_len)
    batches = list(win.split(batch))
    model = pm.model.to(device)
    # The reference: the same forward the probe runs (the trunk, no LM head), without hooks.
    trunk = model.hidden if isinstance(model, GPT) else (lambda x: model.base_model(input_ids=x))
    with torch.no_grad():
        for x in batches[:2]:  # warm-up
            trunk(x.to(device))
        sync(device)
        t0 = time.perf_counter()
        for x in batches:
            trunk(x.to(device))
        sync(device)
        forward_s = time.perf_counter() - t0
    probe_model(model, batches[:5], device, 5, rank=0)  # warm-up: kernels, solver workspaces
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        blocks = probe_model(model, batches, device, 5, rank=0)
        sync(device)
        seconds = time.perf_counter() - t0
    n = win.numel()
    return {
        "rows": n,
        "blocks": len(blocks),
        "capture_fit_s": seconds,
        "rows_per_s": n / seconds,
        "block_rows_per_s": n * len(blocks) / seconds,
        "forward_s": forward_s,
        "overhead_vs_forward": seconds / forward_s,
        "peak_mem_mb": (torch.cuda.max_memory_allocated() - base) / 2**20
        if device.startswith("cuda")
        else rss.growth_mb,
        "mean_r2_lin": sum(b["r2_lin"] for b in blocks) / len(blocks),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="pillm, smollm2 or minilm")
    p.add_argument("--checkpoint", help="pillm: a trained baseline's model.pt")
    p.add_argument("--rows", type=int, default=4096, help="rows at 1x (4x is also measured)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--out")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    if args.model == "pillm":
        pm = own_model(args.checkpoint, args.device)
    else:
        pm = load_probe_model(args.model, {})
    load_s = time.perf_counter() - t0
    texts, _ = load_corpus("wikitext2", "local", args.data, 0.1)
    device_name = (
        torch.cuda.get_device_name() if args.device.startswith("cuda") else
        f"CPU, {torch.get_num_threads()} threads"
    )  # fmt: skip
    print(f"{pm.label} on {device_name} (torch {torch.__version__}), load {load_s:.1f} s")
    results = []
    batch = max(1, args.rows // args.seq_len // 10)  # ten batches at 1x, forty at 4x
    for scale in (1, 4):
        r = measure(pm, texts["test"], scale * args.rows, args.seq_len, batch, args.device)
        results.append({"scale": scale, **r})
        print(
            f"{scale}x: {r['rows']:,} rows x {r['blocks']} blocks in {r['capture_fit_s']:.2f} s ="
            f" {r['rows_per_s']:,.0f} rows/s ({r['block_rows_per_s']:,.0f} block-rows/s);"
            f" plain forward {r['forward_s']:.2f} s -> capture+fit = "
            f"{r['overhead_vs_forward']:.2f}x forward; peak memory +{r['peak_mem_mb']:,.0f} MiB;"
            f" mean R²_lin {r['mean_r2_lin']:.4f}"
        )
    growth = results[1]["peak_mem_mb"] / max(results[0]["peak_mem_mb"], 1e-9)
    print(f"peak memory at 4x rows / at 1x rows: {growth:.2f}")
    if args.out:
        meta = {"model": args.model, "label": pm.label, "device": device_name}
        Path(args.out).write_text(json.dumps({**meta, "results": results}, indent=1))
