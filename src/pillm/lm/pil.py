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

Every selection on a grid (λ of each solve, the functional-gradient step) goes through
``search_grid``: a pick on an edge of its grid extends the grid that way by the grid's ratio, at
most ``pil.grid_extend`` points per side, and the record says whether the first pick was on an
edge, how many points were added and whether the final pick still is (``GridPick``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from pillm.core.log import say
from pillm.core.ridge import GramStats, RidgeFit, heldout_sse, solve_relative, spectrum
from pillm.core.runtime import deterministic, sync
from pillm.core.selection import GridPick, search_grid
from pillm.lm.config import PILConfig
from pillm.models.gpt import GPT


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


# Logits (and their softmax and gradient) per functional-gradient chunk: 2**28 float32 entries
# (1 GiB each). A whole paper batch (256 x 128 tokens x 50,304 classes) at once would hold four
# such tensors of 6.6 GB: 27 GB, more than a job sharing the GPU declares
# (config/resources.yaml, run_lm_fgrad).
FGRAD_CHUNK_LOGITS = 2**28


def target_functional_gradient(model, layer, x, u, y):
    """−∂L/∂o at the current FFN output o (one functional-gradient step; step size set later).

    Sequences do not interact past the FFN output, so the gradient is taken a few sequences
    at a time (``FGRAD_CHUNK_LOGITS``); a batch within that bound is one chunk.
    On CUDA the backward through the upper blocks runs in strict deterministic mode (as LM
    training does): cuDNN's attention backward has no deterministic mode, and with it two
    builds of attn_then_fgrad from the same code on the same GPU give different values."""
    per = max(1, FGRAD_CHUNK_LOGITS // (x.shape[1] * model.cfg.vocab_size))
    grads = []
    with torch.enable_grad(), deterministic(x.is_cuda, strict=True):
        for xc, uc, yc in zip(x.split(per), u.split(per), y.split(per), strict=True):
            o = model.blocks[layer].mlp(uc).detach().requires_grad_(True)
            logits = head_from(model, xc + o, layer)
            loss = F.cross_entropy(logits.float().flatten(0, 1), yc.flatten(), reduction="sum")
            grads.append(-torch.autograd.grad(loss, o)[0])
    return grads[0] if len(grads) == 1 else torch.cat(grads)


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
    # one copy of the split (a few MB of ids), not one per batch: a copy from pageable memory
    # makes the host wait for the GPU, which would then idle while the next batch is queued
    tokens = tokens.to(device)
    for xb, yb in batches(tokens, model.cfg.context, cfg.batch_size, cfg.max_tokens):
        x, u = stream_to_ffn(model, xb, layer)
        Y = target(model, layer, x, u, yb)
        stats.update(pil.features(u).flatten(0, 1), Y.flatten(0, 1))
    return stats


def heldout_r2(weight: torch.Tensor, heldout: GramStats) -> tuple[float, float]:
    """Held-out R² of a solved map, 1 - SSE/SST over every output (SST around the held-out
    column means), and the target's held-out mean square Σy²/(n k). R² is NaN where the target
    is constant (the residual target is exactly 0: nothing to explain)."""
    sse = float(heldout_sse(weight, heldout).sum())
    sst = float((heldout.yty - heldout.y_sum**2 / heldout.n).clamp_min(0.0).sum())
    mean_square = float(heldout.yty.sum()) / (heldout.n * heldout.hty.shape[1])
    return (1 - sse / sst if sst > 0 else float("nan")), mean_square


def solve_layer(
    model, layer, target, train_tokens, valid_tokens, cfg: PILConfig, device
) -> tuple[RidgeFit, GridPick, tuple[float, float]]:
    """Stream the Gram of one layer on train and held-out rows, pick λ, install W_out; return
    the fit, the λ selection and (held-out R², target mean square) of the installed map."""
    sync(device)
    t0 = time.perf_counter()
    tr = gram_for_layer(model, layer, target, train_tokens, cfg, device)
    va = gram_for_layer(model, layer, target, valid_tokens, cfg, device)
    sync(device)
    gram_seconds = time.perf_counter() - t0

    eig = spectrum(tr)  # one decomposition, whatever grid extensions the pick needs

    def pick(grid: list[float]):
        weight, fit = solve_relative(tr, va, grid, cfg.kappa_max, eig)
        return (weight, fit), min(grid, key=lambda r: abs(r - fit.lam_rel)), fit.curve

    (weight, fit), lam = search_grid(
        cfg.lambdas, cfg.grid_extend, pick, "pil.lambdas", extend_key="pil.grid_extend"
    )
    model.blocks[layer].mlp.w_out.copy_(weight.to(model.blocks[layer].mlp.w_out.dtype))
    sync(device)
    fit.gram_seconds = gram_seconds
    fit.solve_seconds = time.perf_counter() - t0 - gram_seconds
    return fit, lam, heldout_r2(weight, va)


@dataclass
class LayerSolves:
    """Per layer, bottom-up: the ridge fit, its λ selection, (fgrad only) its step selection,
    and the solved map's held-out R² and target mean square (``heldout_r2``)."""

    fits: list[RidgeFit]
    lambdas: list[GridPick]
    steps: list[GridPick | None]
    r2: list[tuple[float, float]] = field(default_factory=list)

    def selections(self) -> list[GridPick]:
        return [*self.lambdas, *(s for s in self.steps if s is not None)]


def solve_all_layers(
    model: GPT,
    target: Target,
    train_tokens,
    valid_tokens,
    cfg: PILConfig,
    device,
    step_search: Callable[[int], GridPick] | None = None,
) -> LayerSolves:
    """Bottom-up: solve layer 0, then layer 1 on the updated stream, ...

    Returns each layer's fit, λ selection and functional-gradient step selection (None without
    ``step_search``: the solved map is used as is).
    """
    out = LayerSolves([], [], [])
    for layer in range(model.cfg.n_layer):
        fit, lam, r2 = solve_layer(model, layer, target, train_tokens, valid_tokens, cfg, device)
        say(
            f"solve: layer {layer + 1}/{model.cfg.n_layer}, lambda {lam.value:g}, "
            f"kappa {fit.kappa:.3g}, {fit.gram_seconds + fit.solve_seconds:.1f} s"
        )
        out.fits.append(fit)
        out.lambdas.append(lam)
        out.r2.append(r2)
        out.steps.append(step_search(layer) if step_search is not None else None)
    return out


def step_grid(steps: Sequence[float]) -> list[float]:
    """The functional-gradient step grid: the configured steps plus 0 (the "no step" candidate)."""
    return sorted({0.0, *(float(s) for s in steps)})


def functional_gradient_step_search(
    model: GPT, valid_tokens, cfg: PILConfig, device
) -> Callable[[int], GridPick]:
    """Returns a function that scales layer l's solved map by the held-out-best step size η
    (``step_grid``, extended at its edges by ``search_grid``)."""
    from pillm.models.evaluate import evaluate_lm

    def search(layer: int) -> GridPick:
        pil = model.blocks[layer].mlp
        w = pil.w_out.clone()
        sub = valid_tokens[: cfg.max_tokens or None]
        losses: dict[float, float] = {}

        def pick(grid: list[float]):
            for eta in grid:
                if eta not in losses:
                    pil.w_out.copy_(eta * w)
                    losses[eta] = evaluate_lm(model, sub, model.cfg.context, cfg.batch_size, 1)[
                        "loss"
                    ]
            return None, min(grid, key=lambda e: (losses[e], e)), losses  # ties: smaller step

        steps = step_grid(cfg.fgrad_steps)
        _, chosen = search_grid(
            steps, cfg.grid_extend, pick, "pil.fgrad_steps", extend_key="pil.grid_extend"
        )
        pil.w_out.copy_(chosen.value * w)
        return chosen

    return search


# Seeds of the random output maps (``randomize_outputs``): apart from the feature seeds
# 10,000 seed + layer of models.gpt.attach_pil, whatever the layer count below 5,000.
RANDOM_OUT_SEED = 5_000


@torch.no_grad()
def randomize_outputs(model: GPT, seed: int) -> list[float]:
    """Replace every PIL FFN's solved W_out by a seeded standard Gaussian rescaled to the solved
    map's Frobenius norm (seed 10,000 seed + RANDOM_OUT_SEED + layer); return those norms.

    The control of a solve: the same random features, the same output scale, no fit."""
    norms = []
    for layer, block in enumerate(model.blocks):
        w = block.mlp.w_out
        g = torch.Generator().manual_seed(10_000 * seed + RANDOM_OUT_SEED + layer)
        r = torch.randn(w.shape, generator=g, dtype=torch.float64)
        norm = float(torch.linalg.norm(w.double()))
        w.copy_((r * (norm / float(torch.linalg.norm(r)))).to(w.dtype))
        norms.append(norm)
    return norms


def frozen_copy(model: GPT) -> GPT:
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher
