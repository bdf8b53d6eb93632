"""Language-model metrics: perplexity, next-token accuracy, bits per byte.

Every token of a split after the first is predicted exactly once: the split is cut into
non-overlapping windows of ``context`` inputs, each target the next token. Bits per byte divides
the total negative log-likelihood (in bits) by the UTF-8 bytes those tokens cover, so models with
different tokenizers compare on one scale.

On CUDA the scores of each batch (summed negative log-likelihood, correct predictions) come from
one ``torch.compile``d function of its bf16 logits: Inductor reads the logits in one fused
reduction, where the eager operations write a float32 copy and a log-softmax and read them again
for the argmax. With a vocabulary of 50,304 the logits set an evaluation's time: a pass over
WikiText-2's validation split takes 52 ms against 116 ms eager at d = 256 on one H200
(``benchmarks/eval_speed.py``). The compiled sums differ from the eager ones in float32 rounding
only; on CPU the eager operations run, so CPU builds are unchanged.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable

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


def token_scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Summed next-token NLL (float32) and number of correct argmax predictions of (rows, vocab)
    logits against (rows,) targets."""
    flat = logits.float()
    nll = F.cross_entropy(flat, targets, reduction="sum")
    return nll, (flat.argmax(-1) == targets).sum()


@functools.cache
def compiled_scores(backend: str | Callable = "inductor"):
    """``token_scores`` compiled once per process for any number of rows (``mark_dynamic`` on the
    row dimension at each call: the eval batches and the short tail share one graph)."""
    return torch.compile(token_scores, backend=backend)


_UNCOMPILABLE: set = set()  # backends whose compile failed in this process: eager from then on


def batch_scores(
    logits: torch.Tensor,
    targets: torch.Tensor,
    compiled: bool,
    backend: str | Callable = "inductor",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_scores`` of (batch, time, vocab) logits, compiled or eager. A compile that fails
    (a host whose compiler toolchain Inductor cannot use) says so once and scores eagerly, as a
    training step that cannot be compiled runs uncompiled."""
    flat, y = logits.flatten(0, 1), targets.flatten()
    if not compiled or len(y) < 2 or backend in _UNCOMPILABLE:  # Dynamo specializes a size of 1
        return token_scores(flat, y)
    torch._dynamo.mark_dynamic(flat, 0)
    torch._dynamo.mark_dynamic(y, 0)
    try:
        return compiled_scores(backend)(flat, y)
    except Exception as err:  # noqa: BLE001 - any compiler failure means: score eagerly
        _UNCOMPILABLE.add(backend)
        print(f"warning: torch.compile of the evaluation's scores failed ({type(err).__name__}: "
              f"{err}); evaluations in this process run eagerly", file=sys.stderr)  # fmt: skip
        return token_scores(flat, y)


@torch.no_grad()
def evaluate_lm(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    context: int,
    batch_size: int,
    n_bytes: int,
    autocast_dtype: torch.dtype | None = None,
    compiled: bool | None = None,
    backend: str | Callable = "inductor",
) -> dict[str, float]:
    """Mean NLL, perplexity, accuracy and bits per byte of ``model`` on a token array; the batch
    scores compiled (``compiled``: by default on CUDA; the LM runs pass ``train.compile``) or
    eager."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    compiled = device.type == "cuda" if compiled is None else compiled
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
        nll, right = batch_scores(logits, yb, compiled, backend)
        total_nll += nll.double()
        correct += right
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
