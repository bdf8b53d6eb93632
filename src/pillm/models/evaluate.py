"""Language-model metrics: perplexity, next-token accuracy, bits per byte.

Every token of a split after the first is predicted exactly once: the split is cut into
non-overlapping windows of ``context`` inputs, each target the next token. Bits per byte divides
the total negative log-likelihood (in bits) by the UTF-8 bytes those tokens cover, so models with
different tokenizers compare on one scale.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def perplexity(mean_nll: float) -> float:
    """exp of the mean next-token negative log-likelihood (nats)."""
    return math.exp(mean_nll)


def bits_per_byte(total_nll: float, n_predicted: int, n_tokens: int, n_bytes: int) -> float:
    """Total NLL in bits over the bytes the predicted tokens cover (bytes pro rata per token)."""
    covered_bytes = n_bytes * n_predicted / n_tokens
    return total_nll / math.log(2) / covered_bytes


def windows(tokens: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping (input, target) windows covering tokens[1:] once; the last may be short."""
    n_full = (len(tokens) - 1) // context
    x = tokens[: n_full * context].view(n_full, context)
    y = tokens[1 : n_full * context + 1].view(n_full, context)
    return x, y


@torch.no_grad()
def evaluate_lm(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    context: int,
    batch_size: int,
    n_bytes: int,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Mean NLL, perplexity, accuracy and bits per byte of ``model`` on a token array."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    tokens = tokens.to(device=device, dtype=torch.long)
    x, y = windows(tokens, context)
    tail = len(tokens) - 1 - x.numel()
    batches = [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(x), batch_size)]
    if tail > 0:  # the short last window
        start = x.numel()
        batches.append(
            (tokens[start : start + tail][None], tokens[start + 1 : start + 1 + tail][None])
        )
    total_nll = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    n_pred = 0
    for xb, yb in batches:
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits, _ = model(xb)
        logits = logits.float()
        total_nll += F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="sum").double()
        correct += (logits.argmax(-1) == yb).sum()
        n_pred += yb.numel()
    model.train(was_training)
    nll = total_nll.item()
    mean_nll = nll / n_pred
    return {
        "loss": mean_nll,
        "ppl": perplexity(mean_nll),
        "acc": correct.item() / n_pred,
        "bpb": bits_per_byte(nll, n_pred, len(tokens), n_bytes),
        "n_predicted": float(n_pred),
    }
