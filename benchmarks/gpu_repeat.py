"""Does rerunning an LM run on the same GPU give the same model, bit for bit?

    python benchmarks/gpu_repeat.py --tokens results/paper/tokens/wikitext2 \
        --variant baseline --variant attn_only --repeats 2 [--deterministic] --out x.json

Each ``--variant`` (one trained from scratch: no dependencies) runs ``--repeats`` times in this
process through ``pillm.lm.run.run_variant``, exactly as the ``run_lm`` rule runs it (config's
model and train sections, seed ``--seed``). Against the first repeat it reports whether every
parameter is bitwise equal, the largest parameter difference and the test-loss difference, and
each repeat's tokens/s. ``--deterministic`` first sets ``torch.use_deterministic_algorithms``
(warn-only: the warnings name the operations without a deterministic kernel, reported too),
``CUBLAS_WORKSPACE_CONFIG`` and cuDNN's deterministic flag process-wide. The config's
``train.deterministic`` (on, strict) applies inside ``run_variant``, so runs train
deterministically either way; ``train.deterministic: false`` in ``--config`` shows the default
kernels. ``--tiny``: a CPU smoke test (tiny model
and random tokens; ``--tokens`` ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def tiny_tokens(folder: Path) -> str:
    """A tokens folder of random ids, the layout ``load_tokens`` reads (CPU smoke test)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"train": 20_000, "valid": 2_000, "test": 2_000}
    for split, n in sizes.items():
        np.save(folder / f"{split}.npy", rng.integers(0, 64, n).astype(np.int32))
    meta = {"vocab_size": 64, "corpus": "random", "tokenizer": "-", "policy": "random ids",
            "bytes": {s: 4 * n for s, n in sizes.items()}}  # fmt: skip
    (folder / "meta.json").write_text(json.dumps(meta))
    return str(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--tokens", default="results/paper/tokens/wikitext2")
    ap.add_argument("--variant", action="append", help="repeatable (default baseline)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.deterministic:  # before the first cuBLAS call
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"

    import torch

    from pillm.core.runtime import resolve_device
    from pillm.core.tensor_files import load_tensor_file
    from pillm.lm.run import run_variant

    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    cfg = yaml.safe_load(Path(args.config).read_text())
    params = {"model": cfg["model"], "train": cfg["train"]}
    work = Path(tempfile.mkdtemp(prefix="gpu_repeat_"))
    tokens = args.tokens
    if args.tiny:
        params["model"] = {**params["model"], "n_layer": 2, "d_model": 32, "n_head": 2,
                           "context": 16}  # fmt: skip
        params["train"] = {**params["train"], "epochs": 1, "batch_size": 8, "max_steps": 8,
                           "warmup_steps_timing": 2, "eval_batch_size": 8}  # fmt: skip
        tokens = tiny_tokens(work / "tokens")
    device = resolve_device(args.device)
    rows, messages = [], set()
    for variant in args.variant or ["baseline"]:
        first = None
        for r in range(args.repeats):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = work / f"{variant}-{r}"
                m = run_variant(variant, args.seed, params, tokens, {}, str(out), device)
            messages |= {str(w.message).split("\n")[0][:200] for w in caught
                         if "determinis" in str(w.message)}  # fmt: skip
            state = load_tensor_file(out / "model.pt", "pillm.gpt").tensors
            row = {"variant": variant, "repeat": r, "test_loss": m["test_loss"],
                   "tokens_per_s": m["tokens_per_s"], "grad_time_s": m["grad_time_s"]}  # fmt: skip
            if first is None:
                first = (state, m["test_loss"])
            else:
                diffs = [(a.float() - first[0][k].float()).abs().max().item()
                         for k, a in state.items() if a.is_floating_point()]  # fmt: skip
                row |= {"bitwise_equal": all(torch.equal(a, first[0][k]) for k, a in state.items()),
                        "max_param_diff": max(diffs, default=0.0),
                        "test_loss_diff": m["test_loss"] - first[1]}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    report = {"device": name, "torch": torch.__version__, "deterministic": args.deterministic,
              "runs": rows, "nondeterministic_ops": sorted(messages)}  # fmt: skip
    print(f"# {name}, deterministic={args.deterministic}")
    for msg in sorted(messages):
        print("warning:", msg)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
