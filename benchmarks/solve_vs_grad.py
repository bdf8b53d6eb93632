"""Benchmark, isolated: the PIL solve of an LM's FFN layers vs AdamW training of the same FFNs.

One job on the device, nothing else running. Both sides are measured ``--repeats`` times after a
warm-up that is not timed (CUDA context, cuBLAS/cuSOLVER handles, torch.compile and CUDA-graph
capture), and the record keeps every repeat plus median, min and max:

* PIL solve: every FFN layer of the attention-only model (the ``pil_pure`` variant: Bi-PIL
  features, target propagation) solved bottom-up over the whole train split, λ picked on the
  held-out split (``lm/pil.py:solve_all_layers``), as in the pipeline's runs.
* AdamW: the baseline model at the same shape, only its FFN parameters trainable (attention,
  embeddings and norms frozen), trained by the pipeline's trainer (``lm/train.py:fit``) for the
  config's epochs with periodic validation off. The time is the steady-state step time times
  the number of steps: the first ``train.warmup_steps_timing`` steps (compile, graph capture,
  allocator) are excluded, as in the pipeline's tokens/s. Its wall time with warm-up is
  recorded beside it.

Writes ``benchmarks/records/solve_vs_grad_<device>_<UTC time>.json``; the paper's
``timing_macros`` rule renders the newest record there (``pillm.paper.build:write_timing``).

    python benchmarks/solve_vs_grad.py                    # paper shape (GPU), after the DAG
    python benchmarks/solve_vs_grad.py --synthetic 2400000    # paper shape, no tokens needed
    python benchmarks/solve_vs_grad.py --tiny --device cpu  # a tiny CPU test record
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import yaml

from pillm.core.records import git_revision, provenance, write_json
from pillm.core.runtime import resolve_device, seed_everything, sync
from pillm.data.corpus import load_tokens
from pillm.lm.config import ModelConfig, PILConfig, TrainConfig
from pillm.lm.pil import solve_all_layers, target_propagation
from pillm.lm.train import fit
from pillm.models.gpt import GPT, GPTConfig, attach_pil

RECORDS = Path(__file__).parent / "records"
TINY_MODEL = {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32}
TINY_TOKENS = (8_000, 2_000)  # train, held-out
TINY_VOCAB = 512
GPT2_VOCAB = 50257


def spread(xs: list[float]) -> dict[str, float | list[float]]:
    return {"seconds": xs, "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def solve_once(model_cfg: ModelConfig, vocab: int, arrays: dict, pil: PILConfig, device: str):
    """Seconds of one full bottom-up solve (fresh random features), and the fits."""
    cfg = GPTConfig(vocab_size=vocab, **asdict(model_cfg), use_ffn=False)
    model = GPT(cfg).to(device).eval()
    attach_pil(model, "bi", seed=0)
    sync(device)
    t0 = time.perf_counter()
    out = solve_all_layers(model, target_propagation, arrays["train"], arrays["valid"], pil, device)
    sync(device)
    seconds = time.perf_counter() - t0
    fits = out.fits if hasattr(out, "fits") else out[0]  # LayerSolves (#14) or (fits, steps)
    return seconds, fits


def adamw_once(model_cfg, vocab, arrays, meta, train: TrainConfig, seed: int, device: str):
    """(steady-state seconds over all steps, wall seconds with warm-up, steps) of FFN-only AdamW."""
    seed_everything(seed)
    model = GPT(GPTConfig(vocab_size=vocab, **asdict(model_cfg))).to(device)
    for name, p in model.named_parameters():
        p.requires_grad_(".mlp." in name)
    metrics, _ = fit(model, arrays, meta, train, seed, device)
    steps, tokens = metrics["train_steps"], metrics["train_tokens"]
    steady = tokens / metrics["tokens_per_s"]  # per-token time of the timed steps x all tokens
    return steady, metrics["grad_time_s"], steps


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--tokens-dir", default="results/paper/tokens/wikitext2")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, synthetic tokens (CPU test)")
    ap.add_argument(
        "--synthetic",
        type=int,
        default=0,
        help="N: uniform random tokens (N train, N/9 held-out, GPT-2 vocabulary) instead of "
        "--tokens-dir; the cost of both sides does not depend on token values",
    )
    ap.add_argument("--out-dir", default=str(RECORDS))
    args = ap.parse_args()
    device = resolve_device(args.device)
    cfg = yaml.safe_load(Path(args.config).read_text())
    model_cfg = ModelConfig.from_dict(cfg["model"], "model")
    pil = replace(PILConfig.from_dict(cfg["pil"], "pil"), max_tokens=0)
    train = replace(TrainConfig.from_dict(cfg["train"], "train"), eval_every=0, max_steps=0)
    if args.tiny:
        model_cfg = replace(model_cfg, **TINY_MODEL)
        train = replace(train, epochs=1, batch_size=8, warmup_steps_timing=2)
        pil = replace(pil, batch_size=16)
        g = torch.Generator().manual_seed(1)
        n_train, n_valid = TINY_TOKENS
        arrays = {
            "train": torch.randint(0, TINY_VOCAB, (n_train,), generator=g),
            "valid": torch.randint(0, TINY_VOCAB, (n_valid,), generator=g),
        }
        meta = {"vocab_size": TINY_VOCAB, "bytes": {"valid": n_valid}, "corpus": "synthetic"}
    elif args.synthetic:
        g = torch.Generator().manual_seed(1)
        n_valid = max(args.synthetic // 9, 4 * model_cfg.context)
        arrays = {
            "train": torch.randint(0, GPT2_VOCAB, (args.synthetic,), generator=g),
            "valid": torch.randint(0, GPT2_VOCAB, (n_valid,), generator=g),
        }
        meta = {"vocab_size": GPT2_VOCAB, "bytes": {"valid": n_valid}, "corpus": "synthetic"}
    else:
        if not (Path(args.tokens_dir) / "meta.json").is_file():
            raise SystemExit(
                f"{args.tokens_dir}/meta.json missing: build the tokens first (snakemake "
                "--configfile config/config.yaml results/paper/tokens/wikitext2/meta.json) or "
                "pass --tokens-dir"
            )
        arrays, meta = load_tokens(args.tokens_dir)
    vocab = meta["vocab_size"]

    # Warm-up, not timed: a solve on a slice, one short AdamW run (compiles, captures graphs).
    rows = 4 * model_cfg.context * pil.batch_size
    warm = {"train": arrays["train"][:rows], "valid": arrays["valid"][: rows // 2]}
    solve_once(model_cfg, vocab, warm, pil, device)
    adamw_once(model_cfg, vocab, arrays, meta, replace(train, max_steps=20), 0, device)

    solves, fits = [], None
    grads, walls, steps = [], [], 0
    for k in range(args.repeats):
        s, fits = solve_once(model_cfg, vocab, arrays, pil, device)
        solves.append(s)
        g, w, steps = adamw_once(model_cfg, vocab, arrays, meta, train, k, device)
        grads.append(g)
        walls.append(w)
        print(f"repeat {k}: PIL solve {s:.3f} s, AdamW (FFN only) {g:.3f} s (wall {w:.3f} s)")

    name = provenance(device)["device_name"]
    now = dt.datetime.now(dt.UTC)
    record = {
        "kind": "solve_vs_grad",
        "created_utc": now.isoformat(timespec="seconds"),
        "device": device,
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "cpu_threads": torch.get_num_threads(),
        "git_rev": git_revision(),
        "tiny": args.tiny,
        "tokens": "synthetic uniform" if args.tiny or args.synthetic else str(args.tokens_dir),
        "shape": {
            **asdict(model_cfg),
            "vocab_size": vocab,
            "pil_features": "bi",
            "pil_features_p": fits[0].n_features,
            "train_tokens": len(arrays["train"]),
            "valid_tokens": len(arrays["valid"]),
        },
        "train": {
            "epochs": train.epochs,
            "batch_size": train.batch_size,
            "steps": steps,
            "warmup_steps_excluded": train.warmup_steps_timing,
            "compile": train.compile,
            "cuda_graphs": train.cuda_graphs,
        },
        "pil": {"lambdas": list(pil.lambdas), "batch_size": pil.batch_size},
        "repeats": args.repeats,
        "solve_per_layer_last": [round(f.gram_seconds + f.solve_seconds, 4) for f in fits],
        "solve_kappa_max": max(f.kappa for f in fits),
        "solve": spread(solves),
        "adamw": {**spread(grads), "wall_with_warmup": walls},
        "adamw_over_solve_median": statistics.median(grads) / statistics.median(solves),
    }
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    out = Path(args.out_dir) / f"solve_vs_grad_{slug}_{now:%Y%m%dT%H%M%SZ}.json"
    write_json(out, record)
    print(json.dumps({k: record[k] for k in ("device_name", "adamw_over_solve_median")}))
    print(f"solve median {record['solve']['median']:.3f} s, AdamW median "
          f"{record['adamw']['median']:.3f} s -> {out}")  # fmt: skip


if __name__ == "__main__":
    main()
