"""The closed-form solve's cost against AdamW (``scaling-cost``): at every width of the scaling
study (rule ``scaling_cost``), and at the LM study's own shape (rule
``solve_timing``, the timing the paper quotes), on one device in one job, the PIL solve of every
FFN layer against AdamW training of the same FFNs.

* Solve: every FFN layer of an attention-only model at that width (Bi-PIL features, width 8d,
  target propagation: the ``pil_then_attn`` solve) solved bottom-up over the train split,
  λ picked on the held-out split (``pillm.lm.pil.solve_all_layers``); split into Gram streaming
  (O(n p²) for n tokens and p = 8d features) and the decomposition and λ search (O(p³)).
* AdamW: the baseline at that width with only its FFN parameters trainable, trained by the LM
  trainer (``pillm.lm.train.fit``) for the configured epochs; the time is the steady-state step
  time times the steps (compile and graph capture excluded, as in the LM runs' tokens/s).

Each width's solve is warmed up first (the first layer's solve on a slice: the solver libraries'
first calls and the allocator's blocks at that width; every layer has the same shapes), then
both are measured ``repeats`` times; the record keeps the median and the range. AdamW needs no
run of its own to warm up: its time starts after ``train.warmup_steps_timing`` steps, which
hold the compile and the CUDA-graph capture (``adamw_wall_s``, the run's whole time, includes
them). On a CUDA host both rules declare
the whole GPU memory budget, so no other GPU job runs beside them (``alone`` true): beside the
build's other jobs a width's times rose 1.6-5x and lost their order in width (AdamW at d = 384
above d = 768, on two H200s). Elsewhere (a CPU, a SLURM job) ``alone`` is false. Compiling a
width's training step takes 6-9 s on one H200, the GPU 30-35 % busy meanwhile:
``scaling-cost-warm`` (rule ``scaling_cost_warm``) trains a short AdamW run of every width among
the build's other jobs first, so the compiled graphs and kernels are in the host's Inductor cache
when the timing runs alone (a warm-up from that cache took 1.6 s at d = 256). It solves nothing:
what a warm solve prepares lives in the process that ran it. Where jobs do not share a disk the
timing compiles as before.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pillm.core.records import provenance, write_json
from pillm.lm.config import ScalingCostParams

WARM_STEPS = 20  # AdamW steps of the untimed warm-up run (compile, CUDA-graph capture)


def _time_solve(model_cfg, vocab: int, arrays: dict, pil, device: str) -> dict[str, float]:
    import torch

    from pillm.core.runtime import sync
    from pillm.lm.pil import solve_all_layers, target_propagation
    from pillm.models.gpt import GPT, GPTConfig, attach_pil

    cfg = GPTConfig(vocab_size=vocab, **asdict(model_cfg), use_ffn=False)
    model = GPT(cfg).to(device).eval()
    attach_pil(model, "bi", seed=0)
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = solve_all_layers(
            model, target_propagation, arrays["train"], arrays["valid"], pil, device
        )
    sync(device)
    total = time.perf_counter() - t0
    gram = sum(f.gram_seconds for f in out.fits)
    return {
        "solve_s": total,
        "gram_s": gram,
        "decompose_s": total - gram,
        "features": float(out.fits[0].n_features),
    }


def _time_adamw(model_cfg, vocab, arrays, meta, train, seed: int, device: str) -> dict[str, float]:
    from pillm.core.runtime import seed_everything
    from pillm.lm.train import fit
    from pillm.models.gpt import GPT, GPTConfig

    seed_everything(seed)
    model = GPT(GPTConfig(vocab_size=vocab, **asdict(model_cfg))).to(device)
    for name, p in model.named_parameters():
        p.requires_grad_(".mlp." in name)
    m, _ = fit(model, arrays, meta, train, seed, device)
    return {
        "adamw_s": m["train_tokens"] / m["tokens_per_s"],
        "adamw_wall_s": m["grad_time_s"],
        "steps": float(m["train_steps"]),
        "tokens": float(m["train_tokens"]),
    }


def _warm_solve(model_cfg, vocab, arrays, pil, device: str) -> None:
    """Untimed: the first layer's solve on a slice of the split (the layers' shapes are equal)."""
    rows_warm = 4 * model_cfg.context * pil.batch_size
    warm = {"train": arrays["train"][:rows_warm], "valid": arrays["valid"][: rows_warm // 2]}
    _time_solve(replace(model_cfg, n_layer=1), vocab, warm, pil, device)


def _setup(params: dict[str, Any], tokens: list[str], device: str):
    """Both commands' inputs: the params, the device, the token splits (the folder of
    ``tokens``) and their meta, and the training section without evaluations."""
    from pillm.core.runtime import resolve_device
    from pillm.data.corpus import load_tokens

    cfg = ScalingCostParams.from_dict(params, "scaling cost")
    arrays, meta = load_tokens(Path(tokens[0]).parent)
    return cfg, resolve_device(device), arrays, meta, replace(cfg.train, eval_every=0)


def _width(cfg: ScalingCostParams, d: int):
    """The model section at width ``d`` (heads of ``head_dim``)."""
    return replace(cfg.model, d_model=d, n_head=d // cfg.head_dim)


def warm_cost(params: dict[str, Any], tokens: list[str], out: str, device: str) -> None:
    """Warm up every width, timing nothing: a short AdamW run (compile, graph capture), so the
    compiled steps land in the host's compile cache before ``measure_cost`` runs alone. Writes
    ``out`` (JSON): the widths and each one's seconds."""
    cfg, device, arrays, meta, train = _setup(params, tokens, device)
    short = replace(train, max_steps=WARM_STEPS)
    rows = []
    for d in cfg.widths:
        t0 = time.perf_counter()
        _time_adamw(_width(cfg, d), meta["vocab_size"], arrays, meta, short, 0, device)
        rows.append({"d_model": d, "warm_s": time.perf_counter() - t0})
        print(f"d={d}: warmed up in {rows[-1]['warm_s']:.1f} s", flush=True)
    write_json(out, [{**r, **provenance(device, meta)} for r in rows])


def measure_cost(params: dict[str, Any], tokens: list[str], out: str, device: str) -> None:
    """Write ``out`` (JSON): one row per width with the median solve and AdamW seconds; the
    token splits are the folder of ``tokens``."""
    from pillm.lm.train_step import StepOptions, output_layer_at

    cfg, device, arrays, meta, train = _setup(params, tokens, device)
    vocab = meta["vocab_size"]
    pil = cfg.pil  # as the runs solve (pil.max_tokens: 0 streams the whole split)
    rows = []
    for d in cfg.widths:
        model_cfg = _width(cfg, d)
        _warm_solve(model_cfg, vocab, arrays, pil, device)
        reps = [
            {
                **_time_solve(model_cfg, vocab, arrays, pil, device),
                **_time_adamw(model_cfg, vocab, arrays, meta, train, k, device),
            }
            for k in range(cfg.repeats)
        ]
        row = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
        for k in ("solve_s", "adamw_s"):
            row |= {f"{k}_min": min(r[k] for r in reps), f"{k}_max": max(r[k] for r in reps)}
        row |= {
            "d_model": d,
            "output_layer": output_layer_at(  # what the trainer ran at this width
                StepOptions.from_config(train, device).output_layer, d, vocab, device
            ),
            "n_layer": model_cfg.n_layer,
            "context": model_cfg.context,
            "epochs": train.epochs,
            "repeats": cfg.repeats,
            "alone": cfg.alone,
            "train_tokens_split": len(arrays["train"]),
        }
        print(
            f"d={d}: solve {row['solve_s']:.3f} s (Gram {row['gram_s']:.3f} s), "
            f"AdamW {row['adamw_s']:.3f} s over {int(row['steps'])} steps",
            flush=True,
        )
        rows.append(row)
    context = provenance(device, meta)
    write_json(out, [{**r, "corpus": meta["corpus"], **context} for r in rows])
