"""Pseudoinverse-learned (PIL) feed-forward blocks, solved layer by layer in closed form.

A PIL FFN keeps a fixed random input map and solves only its output map by ridge regression:

    H = [GELU(u W_1 + b_1), ..., GELU(u W_m + b_m), 1]     W_i ~ N(0, 1/d), fixed by a seed
    W_out = (HᵀH + λI)⁻¹ HᵀY                               (float64 Gram, ridge.py)

``m = 1`` is single PIL; ``m = 2`` is the seed outline's "Bi-PIL" (two independent projections
concatenated). Note that two independent Gaussian projections of width w are distributed exactly
like one of width 2w: the ``single8d`` control separates "two projections" from "more features".
(The TNNLS Bi-PIL is a different, forward/backward scheme; it is not what this implements.)

Layers are solved bottom-up: the stream entering layer l already contains the solved FFNs of
layers < l. The regression target Y at a layer is what distinguishes the training strategies
(``TARGETS``); λ is chosen per layer on the held-out split from one eigendecomposition.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from pillm.core.ridge import GramStats, RidgeFit, solve_relative
from pillm.core.runtime import sync
from pillm.models.gpt import GPT
from pillm.settings import PILConfig


def stream_to_ffn(model: GPT, idx: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual stream entering layer ``layer``'s FFN (after its attention) and its LN input u."""
    T = idx.shape[1]
    x = model.wte(idx) + model.wpe(torch.arange(T, device=idx.device))
    for block in model.blocks[:layer]:
        x = block(x)
    block = model.blocks[layer]
    if block.attn is not None:
        x = x + block.attn(block.ln_1(x))
    return x, block.ln_2(x)


def head_from(model: GPT, x: torch.Tensor, layer: int) -> torch.Tensor:
    """Logits from the residual stream leaving layer ``layer``'s FFN."""
    for block in model.blocks[layer + 1 :]:
        x = block(x)
    return model.lm_head(model.ln_f(x))


# A target maps (model, layer, x_mid, u, next_ids) -> Y (B, T, d): what the FFN output should be.
Target = Callable[[GPT, int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def target_residual(model, layer, x, u, y):
    """Seed's 'residual' target: leave the stream where attention put it (FFN output 0)."""
    return torch.zeros_like(x)


def target_propagation(model, layer, x, u, y):
    """Seed's target propagation: move the stream to the next token's embedding."""
    return model.wte(y) - x


def make_distill_target(teacher: GPT) -> Target:
    """The trained teacher's FFN of the same layer, applied to this model's stream."""

    def target(model, layer, x, u, y):
        block = teacher.blocks[layer]
        return block.mlp(block.ln_2(x))

    return target


def target_functional_gradient(model, layer, x, u, y):
    """−∂L/∂o at the current FFN output o (one functional-gradient step; step size set later)."""
    with torch.enable_grad():
        o = model.blocks[layer].mlp(u).detach().requires_grad_(True)
        logits = head_from(model, x + o, layer)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum")
        (grad,) = torch.autograd.grad(loss, o)
    return -grad


def batches(tokens: torch.Tensor, context: int, batch_size: int, max_tokens: int) -> Iterator:
    """Non-overlapping (input, next-token) windows, at most ``max_tokens`` inputs, in order."""
    n = (len(tokens) - 1) // context
    if max_tokens:
        n = min(n, max(1, max_tokens // context))
    x = tokens[: n * context].view(n, context)
    y = tokens[1 : n * context + 1].view(n, context)
    for i in range(0, n, batch_size):
        yield x[i : i + batch_size], y[i : i + batch_size]


@torch.no_grad()
def gram_for_layer(model, layer, target, tokens, cfg: PILConfig, device) -> GramStats:
    pil = model.blocks[layer].mlp
    d = model.cfg.d_model
    stats = GramStats.zeros(pil.n_features, d, device=device)
    for xb, yb in batches(tokens, model.cfg.context, cfg.batch_size, cfg.max_tokens):
        xb, yb = xb.to(device), yb.to(device)
        x, u = stream_to_ffn(model, xb, layer)
        Y = target(model, layer, x, u, yb)
        stats.update(pil.features(u).flatten(0, 1), Y.flatten(0, 1))
    return stats


def solve_layer(
    model, layer, target, train_tokens, valid_tokens, cfg: PILConfig, device
) -> RidgeFit:
    """Stream the Gram of one layer on train and held-out rows, pick λ, install W_out."""
    sync(device)
    t0 = time.perf_counter()
    tr = gram_for_layer(model, layer, target, train_tokens, cfg, device)
    va = gram_for_layer(model, layer, target, valid_tokens, cfg, device)
    sync(device)
    gram_seconds = time.perf_counter() - t0
    weight, fit = solve_relative(tr, va, cfg.lambdas, cfg.kappa_max)
    model.blocks[layer].mlp.w_out.copy_(weight.to(model.blocks[layer].mlp.w_out.dtype))
    sync(device)
    fit.gram_seconds = gram_seconds
    fit.solve_seconds = time.perf_counter() - t0 - gram_seconds
    return fit


def solve_all_layers(
    model: GPT,
    target: Target,
    train_tokens,
    valid_tokens,
    cfg: PILConfig,
    device,
    step_search: Callable[[int], float] | None = None,
) -> tuple[list[RidgeFit], list[float]]:
    """Bottom-up: solve layer 0, then layer 1 on the updated stream, ...

    Returns one fit per layer and its functional-gradient step size (1 without ``step_search``).
    """
    fits, steps = [], []
    for layer in range(model.cfg.n_layer):
        fits.append(solve_layer(model, layer, target, train_tokens, valid_tokens, cfg, device))
        steps.append(step_search(layer) if step_search is not None else 1.0)
    return fits, steps


def functional_gradient_step_search(
    model: GPT, valid_tokens, cfg: PILConfig, device
) -> Callable[[int], float]:
    """Returns a function that scales layer l's solved map by the held-out-best step size η."""
    from pillm.models.evaluate import evaluate_lm

    def search(layer: int) -> float:
        pil = model.blocks[layer].mlp
        w = pil.w_out.clone()
        sub = valid_tokens[: cfg.max_tokens or None]
        best = (math.inf, 0.0)
        for eta in cfg.fgrad_steps:
            pil.w_out.copy_(eta * w)
            loss = evaluate_lm(model, sub, model.cfg.context, cfg.batch_size, 1)["loss"]
            best = min(best, (loss, eta))
        pil.w_out.copy_(best[1] * w)
        return best[1]

    return search


def frozen_copy(model: GPT) -> GPT:
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher
