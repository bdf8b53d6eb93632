"""Benchmark: PIL-LoRA fit time against the time LoRA needs to reach the same SST-2 accuracy.

One process, one device, one frozen base model. First a warm-up (a small PIL fit and a few LoRA
steps, excluded). Then, timed with the clock synchronised:

1. PIL-LoRA (``lora.fit_closed_form``: streamed float64 Gram of the random GELU features on the
   fit rows and the dev rows (which pick λ), then one ridge solve) and the plain ridge readout, at 1x
   and ``--scale`` x the fit rows: validation accuracy (the 872 GLUE validation sentences), fit
   time, peak memory. The solve streams, so memory must not grow with the rows.
2. LoRA (``lora.fit_lora``: peft adapters + linear head, AdamW) evaluated every ``--eval-every``
   steps on the dev split (clock stopped meanwhile) until it first reaches PIL-LoRA's dev
   accuracy or runs out of ``--max-steps``: the training time it needed, the steps, its
   validation accuracy and its peak memory.

Peak memory: GPU: peak allocated during the fit; CPU: peak RSS growth over the RSS before it,
sampled every 5 ms. Printed as a table with ratios, optionally saved as JSON.

    python benchmarks/lora_speed.py --model minilm --n-train 1024 --max-steps 200        # CPU
    python benchmarks/lora_speed.py --model pillm --device cuda \
        --checkpoint results/paper/lm/baseline/seed0/model.pt \
        --tokenizer results/paper/tokens/wikitext2/tokenizer.json --data .gpu/data        # GPU
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil
import torch
import yaml

from pillm.core.records import provenance
from pillm.core.runtime import resolve_device
from pillm.data.sst2 import load_sst2, split_train
from pillm.lora.base import BaseModel, load_base
from pillm.lora.config import LoraConfig
from pillm.lora.methods import fit_closed_form, fit_lora


class PeakMemory:
    """Peak memory (MiB) while the block runs: CUDA peak allocated, or CPU RSS growth."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self) -> PeakMemory:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            return self
        self.proc, self.stop = psutil.Process(), False
        self.base = self.peak = self.proc.memory_info().rss
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self) -> None:
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
            self.mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.growth_mb = (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        else:
            self.stop = True
            self.thread.join()
            self.mb = self.peak / 2**20
            self.growth_mb = (self.peak - self.base) / 2**20


def random_own(device: str) -> BaseModel:
    """The pipeline's GPT at the paper shape, random init, GPT-2-sized byte vocabulary stand-in."""
    from pillm.models.gpt import GPT, GPTConfig

    cfg = yaml.safe_load(Path("config/config.yaml").read_text())["model"]
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50_257, **cfg)).eval()

    def ids(sents: list[str], max_len: int) -> list[list[int]]:
        return [list(s.encode())[:max_len] or [0] for s in sents]

    return BaseModel("pillm-s0", "pillm (random init)", "causal", model, ids, 0, cfg["d_model"], 0)


def main() -> None:
    section = yaml.safe_load(Path("config/config.yaml").read_text())["lora"]
    cfg = LoraConfig.from_dict(
        {k: v for k, v in section.items() if k not in ("models", "seeds")}, "lora"
    )
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="pillm", help="pillm or minilm")
    ap.add_argument("--checkpoint", help="pillm: model.pt (random init without it)")
    ap.add_argument("--tokenizer", help="pillm: the tokenizer.json it was trained with")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--data", default="../shared/data", help="the offline mirror (data.local_dir)")
    ap.add_argument("--n-train", type=int, default=cfg.n_train)
    ap.add_argument("--n-dev", type=int, default=cfg.n_dev)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=int, default=4, help="second PIL fit on this many x rows")
    ap.add_argument("--max-len", type=int, default=cfg.max_len)
    ap.add_argument("--batch-size", type=int, default=cfg.batch_size)
    ap.add_argument("--pil-rank", type=int, default=cfg.pil_rank)
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-batch-size", type=int, default=cfg.train_batch_size)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    if a.scale > 1 and a.n_train == 0:
        ap.error("--scale needs --n-train > 0: --n-train 0 fits every train row not in --n-dev, "
                 "so there are no more rows to scale to (pass --scale 1)")  # fmt: skip
    if a.threads:
        torch.set_num_threads(a.threads)
    device = resolve_device(a.device)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    splits, sst2_meta = load_sst2("local", a.data)
    if a.model == "pillm" and not a.checkpoint:
        base = random_own(device)
    else:
        base = load_base(f"{a.model}-s{a.seed}", a.checkpoint, a.tokenizer)
    base.model.to(device)
    val = splits["validation"]
    val_ids = base.tokenize(val.sentences, a.max_len)

    def evaluate(predict) -> float:
        return float((predict(val_ids) == val.labels).mean())

    def data(n_train: int):
        fit, sel = split_train(splits["train"], n_train, a.n_dev, a.seed)
        return ((base.tokenize(fit.sentences, a.max_len), fit.labels),
                (base.tokenize(sel.sentences, a.max_len), sel.labels))  # fmt: skip

    def pil(fit, sel, rank: int) -> dict:
        with PeakMemory(device) as mem:
            res = fit_closed_form(base, fit, sel, rank, cfg.lambdas, cfg.kappa_max,
                                  a.seed, a.batch_size, device)  # fmt: skip
        dev_acc = float((res.predict(sel[0]) == sel[1]).mean())
        return {"fit_s": res.fit_seconds, "capture_s": res.metrics["capture_seconds"],
                "solve_s": res.metrics["solve_seconds"], "acc": evaluate(res.predict),
                "dev_acc": dev_acc,
                "peak_mb": mem.mb, "growth_mb": mem.growth_mb, "rows": len(fit[0])}  # fmt: skip

    lcfg = replace(cfg, max_steps=a.max_steps, eval_every=a.eval_every, patience=10**9,
                   train_batch_size=a.train_batch_size, batch_size=a.batch_size)  # fmt: skip
    fit, sel = data(a.n_train)
    small = (fit[0][:256], fit[1][:256])  # warm-up: kernels, allocator, BLAS threads
    fit_closed_form(base, small, small, a.pil_rank, [1e-3], 1e10, 0, a.batch_size, device)
    fit_lora(base, small, small, replace(lcfg, max_steps=3, eval_every=3), a.lr, 0, device)
    out = {"pil_lora": pil(fit, sel, a.pil_rank), "ridge": pil(fit, sel, 0)}
    if a.scale > 1:
        big_fit, big_sel = data(a.n_train * a.scale)
        out[f"pil_lora_x{a.scale}"] = pil(big_fit, big_sel, a.pil_rank)
    target = out["pil_lora"]["dev_acc"]  # on the dev split, as every choice in the pipeline
    with PeakMemory(device) as mem:
        res = fit_lora(base, fit, sel, lcfg, a.lr, a.seed, device, target=target)
    last = res.curve[-1]  # fit_lora ends on its best evaluation's weights: dev_acc is theirs
    out["lora"] = {"fit_s": last["fit_seconds"], "acc": evaluate(res.predict),
                   "dev_acc": res.metrics["best_dev_accuracy"], "steps": last["step"],
                   "reached": last["dev_accuracy"] >= target, "peak_mb": mem.mb,
                   "growth_mb": mem.growth_mb, "curve": res.curve}  # fmt: skip
    prov = provenance(device, sst2_meta)
    print(f"\n{base.label} on {prov['device_name']}, torch {prov['torch']}; fit rows "
          f"{a.n_train:,}, dev rows {a.n_dev:,}, max_len {a.max_len}, "
          f"PIL rank {a.pil_rank}, LoRA r={cfg.lora_rank} lr={a.lr} "
          f"batch {a.train_batch_size}")  # fmt: skip
    print(f"{'method':<26}{'rows':>8}{'dev acc':>9}{'val acc':>9}{'fit s':>10}{'peak MiB':>10}"
          f"{'growth':>9}")  # fmt: skip
    for name, r in out.items():
        rows = r.get("rows", a.n_train)
        print(f"{name:<26}{rows:>8,}{100 * r['dev_acc']:>8.1f}%{100 * r['acc']:>8.1f}%"
              f"{r['fit_s']:>10.3f}"
              f"{r['peak_mb']:>10.0f}{r['growth_mb']:>9.0f}")  # fmt: skip
    p, lo = out["pil_lora"], out["lora"]
    verdict = (f"reached PIL-LoRA's {100 * target:.1f}% dev accuracy after {lo['steps']} steps"
               if lo["reached"] else
               f"did NOT reach PIL-LoRA's {100 * target:.1f}% dev accuracy in {lo['steps']} "
               f"steps (best {100 * max(c['dev_accuracy'] for c in lo['curve']):.1f}%)")  # fmt: skip
    print(f"\nLoRA {verdict}: {lo['fit_s']:.3f} s of training")
    print(f"LoRA time / PIL-LoRA fit time: {lo['fit_s'] / p['fit_s']:.1f}x"
          f"{'' if lo['reached'] else ' (a lower bound)'}")  # fmt: skip
    print(f"LoRA peak memory / PIL-LoRA: {lo['peak_mb'] / p['peak_mb']:.2f}x")
    if a.scale > 1:
        big = out[f"pil_lora_x{a.scale}"]
        print(f"PIL-LoRA at {a.scale}x rows: fit {big['fit_s'] / p['fit_s']:.2f}x the time, "
              f"peak memory {big['peak_mb'] / p['peak_mb']:.2f}x (streamed Gram: rows never kept)")  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "provenance": prov, **out},
                                          indent=2, default=float))  # fmt: skip


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
