"""Per-run extras after a model exists: LAMBADA last-word accuracy and generation samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from .checkpoint import load_checkpoint
from .lambada import generate_samples, lambada_accuracy, load_lambada
from .records import IDENTITY, tidy_records, write_json
from .train import resolve_device


def run_extras(run_dir: str, tokens_dir: str, params: dict[str, Any], device: str) -> None:
    """Write ``extras.json`` (tidy LAMBADA rows) and ``samples.json`` next to the run's metrics."""
    device = resolve_device(device)
    run = Path(run_dir)
    records = json.loads((run / "metrics.json").read_text())
    identity = {k: records[0][k] for k in IDENTITY}
    context = {k: v for k, v in records[0].items() if k not in (*IDENTITY, "metric", "value")}
    model = load_checkpoint(run / "model.pt", device)
    tok = Tokenizer.from_file(str(Path(tokens_dir) / "tokenizer.json"))
    lam, data = params["lambada"], params["data"]
    passages = load_lambada(data["source"], data["local_dir"], lam["max_examples"])
    metrics = lambada_accuracy(model, tok, passages, device=device, batch_size=lam["batch_size"])
    smp = params["samples"]
    samples = generate_samples(
        model, tok, smp["prompts"], smp["max_new_tokens"], seed=identity["seed"], device=device
    )
    write_json(run / "samples.json", [{**identity, **s} for s in samples])
    write_json(run / "extras.json", tidy_records(identity, metrics, context))
