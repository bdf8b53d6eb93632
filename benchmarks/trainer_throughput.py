"""Benchmark: our LM trainer vs a minimal nanoGPT-style trainer, tokens/s and MFU, same call.

Reference: a nanoGPT-style GPT written here (same shape, batch, dropout and tied embeddings as
the config's model; vocabulary padded to 50,304 as nanoGPT does), ``torch.compile`` default
mode, bf16 autocast on CUDA, fused AdamW (decay on matrices only), gradient clip, the same
warm-up + cosine learning rate (``train.lr_at``), the same seeded window order and the same
on-device data, no host sync per step (nanoGPT reads ``loss.item()`` only every 10th step).
Ours: ``pillm.train.fit`` exactly as the pipeline calls it, with the config's ``train`` section
(``compile``, ``cuda_graphs``, ``output_layer``, ``ce_chunk``, ``deterministic`` included) and
``eval_every: 0``; the reference runs PyTorch's default (nondeterministic) kernels, so
``--ours deterministic=false`` is the like-for-like speed comparison;
each ``--ours`` adds a configuration with some of those keys overridden (``output_layer=fused``:
the Triton output layer of ``pillm.lm.kernels.fused_ce``). ``--ref-loss`` adds the reference with its
output layer + loss replaced by a library's fused linear cross-entropy (cut-cross-entropy's
``linear_cross_entropy``, liger-kernel's ``LigerFusedLinearCrossEntropyLoss``) where importable.
Each ``--batch`` repeats everything at that batch size (same tokens per step x steps: the
config's epochs, or ``--steps``), so one call compares both batches.

Both train on the same tokens for the same steps; the first ``train.warmup_steps_timing`` steps
(compilation, CUDA-graph capture) are timed separately and excluded from tokens/s. MFU is model
FLOPs per token (6 N, N without the position table, plus the attention term 12 L d T, as
nanoGPT's ``estimate_mfu``) x tokens/s over the device's peak dense bf16 FLOP/s. Loss "after the
same tokens" is the mean train loss of the last tenth of the steps and the held-out loss on the
validation split's first ``--eval-windows`` windows.

    python benchmarks/trainer_throughput.py --tiny                      # CPU sanity, seconds
    python benchmarks/trainer_throughput.py --device cuda --batch 32 --batch 256 \
        --ours "" --ours output_layer=fused --ref-loss cce --ref-loss liger --out trainer.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

from pillm.core.runtime import kernel_profile, lr_at, resolve_device, sync
from pillm.data.corpus import load_tokens
from pillm.lm.config import OUTPUT_LAYERS, TrainConfig, check_output_layer
from pillm.lm.train import fit
from pillm.models.gpt import GPT, GPTConfig

PEAK_BF16 = (  # dense bf16 FLOP/s by device-name substring, first match wins
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("A100", 312e12),
)
TINY_MODEL = {"n_layer": 2, "d_model": 64, "n_head": 2, "ffn_mult": 4, "context": 32}


# ----------------------------------------------------------------------------- reference
class RefAttention(nn.Module):
    def __init__(self, d: int, n_head: int, dropout: float):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class RefMLP(nn.Module):
    def __init__(self, d: int, mult: int):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = (
            nn.Linear(d, mult * d),
            nn.GELU(),
            nn.Linear(mult * d, d),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class RefBlock(nn.Module):
    def __init__(self, d: int, n_head: int, mult: int, dropout: float):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), RefAttention(d, n_head, dropout)
        self.ln_2, self.mlp = nn.LayerNorm(d), RefMLP(d, mult)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RefGPT(nn.Module):
    """nanoGPT's model.py, condensed: bias everywhere, tied head, GPT-2 init. Dropout where
    ``pillm.model`` has it (embeddings, attention probabilities), so both fit the same function;
    nanoGPT's residual dropouts would only add kernels to the reference."""

    def __init__(self, vocab: int, context: int, n_layer: int, d_model: int, n_head: int,
                 ffn_mult: int, dropout: float):  # fmt: skip
        super().__init__()
        self.context = context
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(RefBlock(d_model, n_head, ffn_mult, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        _, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is not None and self.loss_fn is not None:  # a library's fused head
            return None, self.loss_fn(x.flatten(0, 1), self.lm_head.weight, targets.reshape(-1))
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    loss_fn = None  # (h, w, targets) -> mean loss, for --ref-loss


def library_loss(name: str):
    """A library's fused linear cross-entropy as ``(h, w, targets) -> loss``, or an error text.

    Both run outside ``torch.compile`` (their own Triton kernels) on bf16 operands, as the
    libraries expect under mixed precision."""
    try:
        if name == "cce":
            from cut_cross_entropy import linear_cross_entropy as cce

            def fn(h, w, y):
                return cce(h.to(torch.bfloat16), w.to(torch.bfloat16), y)
        elif name == "liger":
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

            liger = LigerFusedLinearCrossEntropyLoss()

            def fn(h, w, y):
                return liger(w.to(torch.bfloat16), h.to(torch.bfloat16), y)
        else:
            raise SystemExit(f"--ref-loss {name!r}: expected cce or liger")
    except ImportError as err:
        return f"not importable ({err})"
    return torch.compiler.disable(fn)


def ref_optimizer(model: nn.Module, cfg: dict, device: str) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = device.startswith("cuda")
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=tuple(cfg["betas"]), fused=fused)


def window_batches(data: torch.Tensor, T: int, B: int, steps: int, seed: int):
    """fit()'s batches: per epoch a seeded permutation of the non-overlapping windows."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n_windows = (len(data) - 1) // T
    per_epoch = n_windows // B
    offsets = torch.arange(T + 1, device=data.device)
    step = 0
    while step < steps:
        order = torch.randperm(n_windows, generator=gen)[: per_epoch * B].to(data.device) * T
        for b in range(per_epoch):
            if step == steps:
                return
            yield data[order[b * B : (b + 1) * B, None] + offsets]
            step += 1


def run_reference(arrays, model_cfg, train_cfg, steps, seed, device, compile_mode, loss_fn=None):
    """The nanoGPT-style loop; returns (model, timings, per-step losses)."""
    T, B = model_cfg["context"], train_cfg["batch_size"]
    torch.manual_seed(seed)
    vocab = 64 * math.ceil(arrays["vocab"] / 64)  # nanoGPT pads 50257 to 50304
    model = RefGPT(vocab, T, model_cfg["n_layer"], model_cfg["d_model"], model_cfg["n_head"],
                   model_cfg["ffn_mult"], model_cfg["dropout"]).to(device)  # fmt: skip
    model.loss_fn = loss_fn
    opt = ref_optimizer(model, train_cfg, device)
    # Static shapes, as ours (train_step.py): otherwise the held-out pass's other batch size
    # makes Dynamo recompile the model for dynamic shapes, which cost the reference about 10 %
    # of its tokens/s at batch 32 on an H100.
    fwd = (model if compile_mode == "none"
           else torch.compile(model, backend=compile_mode, dynamic=False))  # fmt: skip
    amp = torch.bfloat16 if device.startswith("cuda") else None
    warmup = max(1, round(train_cfg["warmup_frac"] * steps))
    timed_from = train_cfg["warmup_steps_timing"]
    data = arrays["train"].to(device)
    losses = []
    model.train()
    sync(device)
    t0 = t_start = time.perf_counter()
    for step, chunk in enumerate(window_batches(data, T, B, steps, seed)):
        if step == timed_from:
            sync(device)
            t_start = time.perf_counter()
        lr = lr_at(step, steps, train_cfg["lr"], warmup, train_cfg["min_lr_frac"])
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device.split(":")[0], dtype=amp, enabled=amp is not None):
            _, loss = fwd(chunk[:, :-1], chunk[:, 1:])
        loss.backward()
        if train_cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    sync(device)
    t_end = time.perf_counter()
    timed = (steps - timed_from) * B * T / (t_end - t_start)
    return model, {"tokens_per_s": timed, "warmup_s": t_start - t0}, stack(losses)


# ----------------------------------------------------------------------------- ours
def run_ours(arrays, meta, model_cfg, train_cfg, steps, seed, device):
    """``pillm.train.fit`` as the pipeline runs it (run_variant: seed, model, then fit)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = GPT(GPTConfig(vocab_size=arrays["vocab"], **model_cfg)).to(device)
    cfg = {**train_cfg, "max_steps": steps, "epochs": epochs_for(arrays, model_cfg, train_cfg, steps),
           "eval_every": 0}  # fmt: skip
    split = {k: arrays[k] for k in ("train", "valid", "test")}
    metrics, curve = fit(model, split, meta, TrainConfig.from_dict(cfg, "train"), seed, device)
    timed_steps = steps - cfg["warmup_steps_timing"]
    tokens = train_cfg["batch_size"] * model_cfg["context"]
    timed_s = timed_steps * tokens / metrics["tokens_per_s"]
    timings = {
        "tokens_per_s": metrics["tokens_per_s"],
        "warmup_s": metrics["grad_time_s"] - timed_s,
        "compiled": metrics["compiled"],
        "cuda_graphs": metrics["cuda_graphs"],
    }
    return model, timings, [row["train_loss"] for row in curve]


def epochs_for(arrays, model_cfg, train_cfg, steps) -> int:
    per_epoch = ((len(arrays["train"]) - 1) // model_cfg["context"]) // train_cfg["batch_size"]
    if per_epoch < 1:
        raise SystemExit(f"the train split has fewer than batch_size={train_cfg['batch_size']} "
                         f"windows of {model_cfg['context']} tokens: use more tokens or --tiny")  # fmt: skip
    return math.ceil(steps / per_epoch)


# ----------------------------------------------------------------------------- shared
def stack(losses: list[torch.Tensor]) -> list[float]:
    return torch.stack(losses).float().cpu().tolist()


@torch.no_grad()
def heldout_loss(model: nn.Module, tokens: torch.Tensor, T: int, windows: int, device: str):
    """Mean next-token cross-entropy (nats) on the first ``windows`` validation windows."""
    model.eval()
    n = min(windows, (len(tokens) - 1) // T)
    if n < 1:
        return float("nan")
    x = tokens[: n * T].view(n, T).to(device)
    y = tokens[1 : n * T + 1].view(n, T).to(device)
    amp = torch.bfloat16 if device.startswith("cuda") else None
    total = 0.0
    for i in range(0, n, 32):
        with torch.autocast(device.split(":")[0], dtype=amp, enabled=amp is not None):
            logits, _ = model(x[i : i + 32])
        total += F.cross_entropy(logits.float().flatten(0, 1), y[i : i + 32].flatten(),
                                 reduction="sum").item()  # fmt: skip
    return total / (n * T)


def flops_per_token(model: nn.Module, n_layer: int, d: int, T: int) -> float:
    """nanoGPT's estimate: 6 N (N without the position table) + 12 L d T (attention)."""
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    return 6 * n + 12 * n_layer * d * T


def peak_flops(device: str, override: float | None) -> tuple[float | None, str]:
    if override:
        return override, "--peak-flops"
    if not device.startswith("cuda"):
        return None, "none (CPU: pass --peak-flops for MFU)"
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16:
        if key in name:
            return value, f"{name} (table)"
    return None, f"{name} unknown: pass --peak-flops"


def load_data(args) -> tuple[dict, dict, str]:
    """Token arrays (+ 'vocab') and meta: --tokens, else the paper's WikiText-2, else random."""
    tokens_dir = Path(args.tokens or "results/paper/tokens/wikitext2")
    if (args.tokens or not args.tiny) and (tokens_dir / "train.npy").exists():
        arrays, meta = load_tokens(tokens_dir)
        return {**arrays, "vocab": meta["vocab_size"]}, meta, str(tokens_dir)
    if args.tokens:
        raise SystemExit(f"--tokens {args.tokens}: no train.npy/valid.npy/test.npy/meta.json "
                         "there (a results/<scale>/tokens/<corpus> folder of the pipeline)")  # fmt: skip
    g = torch.Generator().manual_seed(0)
    sizes = {"train": 30_000 if args.tiny else 232_309, "valid": 4096, "test": 4096}
    if args.tiny:  # a learnable toy language: a cycle of 40 tokens, 5 % noise from 24 others
        vocab, what = 64, "toy cycle language, vocab 64"
        arrays = {}
        for s, n in sizes.items():
            ids = torch.arange(n) % 40
            noise = torch.rand(n, generator=g) < 0.05
            ids[noise] = torch.randint(40, 64, (int(noise.sum()),), generator=g)
            arrays[s] = ids
    else:
        vocab, what = 50257, "uniform random tokens, vocab 50257 (no real tokens found)"
        arrays = {s: torch.randint(0, vocab, (n,), generator=g) for s, n in sizes.items()}
    meta = {"vocab_size": vocab, "bytes": {s: 4 * n for s, n in sizes.items()}}
    return {**arrays, "vocab": vocab}, meta, what


OVERRIDABLE = ("compile", "cuda_graphs", "output_layer", "ce_chunk", "deterministic")


def parse_override(text: str) -> dict:
    """'compile=false,output_layer=fused' -> {'compile': False, 'output_layer': 'fused'}."""
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in OVERRIDABLE:
            raise SystemExit(f"--ours {text!r}: expected key=value pairs of "
                             f"{', '.join(OVERRIDABLE)}, e.g. --ours output_layer=fused or "
                             "--ours output_layer=chunked,ce_chunk=1024")  # fmt: skip
        out[key] = value if key == "output_layer" else yaml.safe_load(value)
        ok = {"ce_chunk": type(out[key]) is int and out[key] >= 0,
              "output_layer": out[key] in OUTPUT_LAYERS}.get(key, isinstance(out[key], bool))  # fmt: skip
        if not ok:
            what = {"ce_chunk": "an integer >= 0", "output_layer": " | ".join(OUTPUT_LAYERS)}
            raise SystemExit(f"--ours {text!r}: {key} must be {what.get(key, 'true/false')}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml", help="model + train sections")
    ap.add_argument("--tokens", help="a pipeline tokens folder (default: the paper's WikiText-2)")
    ap.add_argument("--batch", type=int, action="append", default=None,
                    help="batch size (default: the config's); repeatable: every trainer at each")  # fmt: skip
    ap.add_argument("--steps", type=int,
                    help="optimizer steps at every batch (default: the config's epochs at that "
                         "batch, at least --min-steps)")  # fmt: skip
    ap.add_argument("--min-steps", type=int, default=60)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="tiny model and random tokens (CPU test)")
    ap.add_argument("--ours", action="append", default=None,
                    help="a configuration of ours: overrides of train.compile/cuda_graphs/"
                         "output_layer/ce_chunk ('' = the config as is); repeatable")  # fmt: skip
    ap.add_argument("--ref-compile", default=None,
                    help="torch.compile backend of the reference: inductor (default on CUDA), "
                         "aot_eager, or none (default with --tiny on CPU)")  # fmt: skip
    ap.add_argument("--ref-loss", action="append", default=[], choices=("cce", "liger"),
                    help="also the reference with this library's fused linear cross-entropy "
                         "(cut-cross-entropy, liger-kernel) where importable; repeatable")  # fmt: skip
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every trainer this many times at each batch, each batch and round "
                         "in a fresh process (reference first), and report each round's ratio "
                         "and their median (the reference's speed varied by 8 %% between H100 "
                         "calls)")  # fmt: skip
    ap.add_argument("--peak-flops", type=float, help="peak dense bf16 FLOP/s for MFU")
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=170.0, help="hard wall-clock limit")
    ap.add_argument("--profile", type=int, nargs="?", const=45, default=0, metavar="ROWS",
                    help="print the top ROWS (45) kernels of each of our runs (torch.profiler "
                         "over a second run of it, so compiling and autotuning fall outside "
                         "the window; its eager warm-up steps and capture are in it)")  # fmt: skip
    ap.add_argument("--profile-shapes", action="store_true",
                    help="with --profile: one row per operator and input shapes")  # fmt: skip
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    def on_alarm(*_):
        raise TimeoutError(f"stopped after --max-seconds {args.max_seconds:.0f}: lower --steps "
                           "or drop --ours configurations (results so far are in --out)")  # fmt: skip

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, args.max_seconds)

    device = resolve_device(args.device)
    cfg = yaml.safe_load(Path(args.config).read_text())
    model_cfg, train_cfg = dict(cfg["model"]), dict(cfg["train"])
    if args.tiny:
        model_cfg |= TINY_MODEL
        train_cfg |= {"batch_size": 8, "warmup_steps_timing": 3, "lr": 3e-3}
    arrays, meta, data_name = load_data(args)
    T = model_cfg["context"]
    batches = args.batch or [train_cfg["batch_size"]]

    def steps_at(B: int) -> int:
        if args.steps or args.tiny:
            return args.steps or 16
        per_epoch = ((len(arrays["train"]) - 1) // T) // B
        return max(per_epoch * train_cfg["epochs"], args.min_steps)

    for B in batches:
        if steps_at(B) <= train_cfg["warmup_steps_timing"]:
            raise SystemExit(f"--steps {steps_at(B)} must exceed train.warmup_steps_timing "
                             f"({train_cfg['warmup_steps_timing']}), the untimed warm-up")  # fmt: skip
    overrides = [parse_override(text) for text in args.ours or [""]]  # fail before training
    for over in overrides:
        merged = {**train_cfg, **over}
        try:
            check_output_layer(merged.get("output_layer", "dense"), merged.get("ce_chunk", 0))
        except ValueError as err:
            raise SystemExit(f"--ours {over}: {err}") from None
    ref_losses = {name: library_loss(name) for name in args.ref_loss}
    ref_compile = args.ref_compile or (
        "none" if args.tiny and not device.startswith("cuda") else "inductor"
    )
    peak, peak_src = peak_flops(device, args.peak_flops)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # as fit() sets it, for both trainers
    report = {
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "data": data_name, "batches": batches,
        "steps": {B: steps_at(B) for B in batches}, "context": T, "model": model_cfg,
        "peak_flops": peak, "peak_flops_source": peak_src, "runs": [], "skipped": {},
    }  # fmt: skip
    print(f"# {report['device']}, torch {torch.__version__}; {data_name}; batches {batches}, "
          f"steps {report['steps']} x {T} tokens; model {model_cfg}", flush=True)  # fmt: skip

    units = [(B, r) for B in batches for r in range(args.rounds)]
    if len(units) > 1:  # one fresh process per batch and round
        signal.setitimer(signal.ITIMER_REAL, 0)  # each child keeps its own clock
        run_isolated(args, units, report)
        return

    def record(name: str, B: int, model: nn.Module, timings: dict, losses: list[float],
               role: str, round_: int) -> None:  # fmt: skip
        last = max(1, steps_at(B) // 10)
        fpt = flops_per_token(model, model_cfg["n_layer"], model_cfg["d_model"], T)
        row = {
            "trainer": name, "role": role, "round": round_, "pid": os.getpid(),
            "batch_size": B, "steps": steps_at(B),
            "tokens": steps_at(B) * B * T, **timings,
            "flops_per_token": fpt,
            "mfu": fpt * timings["tokens_per_s"] / peak if peak else None,
            "final_train_loss": float(np.mean(losses[-last:])),
            "heldout_loss": heldout_loss(model, arrays["valid"], T, args.eval_windows, device),
            "peak_memory_mb": torch.cuda.max_memory_allocated() / 2**20
            if device.startswith("cuda") else None,
        }  # fmt: skip
        report["runs"].append(row)
        save(report, args.out)
        print(f"done: batch {B}: {name}: {timings['tokens_per_s']:,.0f} tokens/s",
              file=sys.stderr, flush=True)  # fmt: skip

    def reset_peak() -> None:
        """Clean up between the trainers of one process (gc, a Dynamo reset so each compiles
        anew for its batch, freed CUDA blocks returned). That alone does not keep the reference
        steady over rounds in one process (one H100), hence one process per batch and round
        (``run_isolated``)."""
        gc.collect()
        torch._dynamo.reset()  # compile anew for this batch (Inductor's caches keep it quick)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: at least 1")
    try:
        for B, round_ in ((B, r) for B in batches for r in range(args.rounds)):
            tcfg, steps = {**train_cfg, "batch_size": B}, steps_at(B)
            refs = {} if args.no_reference else {"": None, **ref_losses}
            for lib, loss_fn in refs.items():
                suffix = f", {lib} loss" if lib else ""
                name = f"reference (nanoGPT-style, compile={ref_compile}{suffix})"
                if isinstance(loss_fn, str):  # not importable
                    if round_ == 0:
                        report["skipped"][name] = loss_fn
                        print(f"skipped: {name}: {loss_fn}", file=sys.stderr, flush=True)
                    continue
                reset_peak()
                model, timings, losses = run_reference(arrays, model_cfg, tcfg, steps, args.seed,
                                                       device, ref_compile, loss_fn)  # fmt: skip
                record(name, B, model, timings, losses, "reference" + (f"+{lib}" if lib else ""),
                       round_)  # fmt: skip
                del model
            for over in overrides:
                reset_peak()
                if args.profile:  # compile and autotune outside the profiler's window
                    run_ours(arrays, meta, model_cfg, {**tcfg, **over}, steps, args.seed, device)
                    reset_peak()
                profiled = (kernel_profile(device, f"profile B={B}", args.profile, args.profile_shapes)
                            if args.profile else None)  # fmt: skip
                with profiled or contextlib.nullcontext():
                    model, timings, losses = run_ours(arrays, meta, model_cfg, {**tcfg, **over},
                                                      steps, args.seed, device)  # fmt: skip
                keys = {k: train_cfg.get(k, "-") for k in OVERRIDABLE}
                label = ",".join(f"{k}={v}" for k, v in (keys | over).items())
                if not device.startswith("cuda"):
                    label += "; CPU: eager step"
                record(f"ours ({label})", B, model, timings, losses, "ours", round_)
                del model
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        print_table(report)


def save(report: dict, path: str | None) -> None:
    """Write the results so far as JSON (--out), if asked."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=1))


def child_argv(argv: list[str], drop: set[str]) -> list[str]:
    """``argv`` without the options in ``drop`` (given as '--opt value' or '--opt=value')."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg.split("=", 1)[0] in drop:
            skip = "=" not in arg
        else:
            kept.append(arg)
    return kept


def run_isolated(args, units: list[tuple[int, int]], report: dict) -> None:
    """Each (batch, round) in a fresh process of this script, the reference first in each; the
    runs are merged into ``report`` (their round set), written to --out and tabulated. In one
    process the reference slows run after run (one H100: at batch 256 2.09, 1.87, 1.52 M
    tokens/s over three rounds, and half its speed at batch 32 after batch 256; in fresh
    processes 2.10-2.11 M every time), so sharing a process would bias every ratio after the
    first towards ours."""
    base = child_argv(sys.argv[1:], {"--batch", "--rounds", "--out", "--max-seconds"})
    deadline = time.monotonic() + args.max_seconds
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for B, round_ in units:
                left = deadline - time.monotonic()
                if left < 1:
                    raise TimeoutError(f"stopped after --max-seconds {args.max_seconds:.0f} "
                                       "(results so far are in --out)")  # fmt: skip
                out = Path(tmp) / f"batch{B}_round{round_}.json"
                cmd = [sys.executable, __file__, *base, "--batch", str(B), "--out", str(out),
                       "--max-seconds", f"{left:.0f}"]  # fmt: skip
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if proc.returncode != 0:
                    sys.stdout.write(proc.stdout)
                    raise SystemExit(f"batch {B}, round {round_}: {' '.join(cmd)} exited with "
                                     f"{proc.returncode}")  # fmt: skip
                child = json.loads(out.read_text())
                report["runs"] += [{**row, "round": round_} for row in child["runs"]]
                report["skipped"] |= child["skipped"]
                save(report, args.out)
    finally:
        print_table(report)


def print_table(report: dict) -> None:
    """One table per batch size; "x ref": tokens/s over the plain reference's of the same batch
    and round. With several rounds, each trainer's per-round ratios and their median follow."""
    head = ("trainer", "tokens/s", "MFU", "warm-up s", "train loss", "held-out", "x ref",
            "peak MiB", "path", "round")  # fmt: skip
    for B in report["batches"]:
        runs = [r for r in report["runs"] if r["batch_size"] == B]
        if not runs:
            continue
        refs = {r.get("round", 0): r for r in runs if r["role"] == "reference"}
        print(f"\nbatch {B} ({report['steps'][B]} steps):\n| " + " | ".join(head) + " |\n|"
              + "---|" * len(head))  # fmt: skip
        ratios: dict[str, list[float]] = {}
        for r in runs:
            ref = refs.get(r.get("round", 0))
            ratio = r["tokens_per_s"] / ref["tokens_per_s"] if ref else None
            if ratio is not None and r["role"] != "reference":
                ratios.setdefault(r["trainer"], []).append(ratio)
            mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "n/a"
            mem = f"{r['peak_memory_mb']:,.0f}" if r["peak_memory_mb"] is not None else "-"
            path = "-" if "compiled" not in r else (
                f"compiled={int(r['compiled'])} cuda_graphs={int(r['cuda_graphs'])}")  # fmt: skip
            shown = f"{ratio:.2f}" if ratio is not None else "-"
            print(f"| {r['trainer']} | {r['tokens_per_s']:,.0f} | {mfu} | {r['warmup_s']:.1f} | "
                  f"{r['final_train_loss']:.4f} | {r['heldout_loss']:.4f} | {shown} | {mem} | "
                  f"{path} | {r.get('round', 0)} |")  # fmt: skip
        for name, values in ratios.items():
            if len(values) > 1:
                print(f"x ref over {len(values)} rounds, {name}: median "
                      f"{statistics.median(values):.2f} (rounds: "
                      f"{', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip


if __name__ == "__main__":
    main()
