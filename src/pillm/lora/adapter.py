"""The in-layer PIL adapter (``pil_adapter``): a closed-form low-rank update inside the frozen
model's last feed-forward block, its target the task loss's functional gradient.

The seed's PIL-LoRA adds ``H W_pil`` with ``H = GELU(x W_down)`` to a frozen layer and solves
``W_pil`` by ridge on "residual targets" it leaves undefined. Here the layer is the last FFN
block of the base model (pillm GPT: ``blocks[-1].mlp``; BERT: the last layer's intermediate +
output dense, before its residual LayerNorm) and the target is one step along the negative
functional gradient of the task loss with respect to that block's output:

1. a ridge readout on the frozen pooled states (``methods.ClosedFormHead`` with rank 0, λ on
   the dev split) defines the loss L = ½ Σ ‖[x̂, 1] W_h - y‖² over sentences (y: centred
   one-hot labels);
2. one pass over the fit and dev sentences streams, per real token t, the random features
   h_t = [GELU(û_t W_down), 1] of the block's input u_t (û_t row-standardised, W_down ~ N(0, 1/d)
   fixed by the seed) against g_t = -∂L/∂f_t, f_t the block's output (autograd through the
   frozen layers above it; no weight of the base model changes); W = (HᵀH + λI)⁻¹ HᵀG with λ
   chosen on the dev tokens;
3. the adapter adds Δ(u) = c · h(u) W to the block's output, with c scaling its RMS to η times
   the block output's RMS (the step size); for each η of ``lora.adapter_etas`` the readout is
   solved again on the adapted pooled states (λ on the dev split) and the η of best dev
   accuracy is kept.

The last block affects each token's final state only through that token (no attention above
it), so the target is a per-token step and the solve is the seed's one-pass ridge. Everything
is closed form: no gradient step is taken on any weight; autograd only computes the targets.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor, nn

from pillm.core.ridge import GramStats, solve_relative
from pillm.core.runtime import sync
from pillm.lora.base import BaseModel, by_length, pad_batch, to_device
from pillm.lora.config import LoraConfig
from pillm.lora.methods import ClosedFormHead, FitResult, centred_one_hot, fit_closed_form


def ffn_sites(base: BaseModel) -> tuple[nn.Module, nn.Module]:
    """(module whose input is the last FFN block's input, module whose output is its output)."""
    if base.kind == "causal":
        mlp = base.model.blocks[-1].mlp
        if mlp is None:
            raise ValueError(f"{base.name}: its last block has no FFN for pil_adapter")
        return mlp, mlp
    layer = base.model.encoder.layer[-1]
    return layer.intermediate, layer.output.dense


class Adapter:
    """Δ(u) = scale · [GELU(û W_down), 1] W added to the last FFN block's output while
    ``installed``; with ``capture`` the block's output becomes a leaf whose gradient is the
    target."""

    def __init__(self, base: BaseModel, rank: int, seed: int, device: str):
        self.base = base
        self.features = ClosedFormHead(base.d_model, rank, seed, device)
        self.weight: Tensor | None = None  # (rank + 1, d) float64
        self.scale = 0.0
        self.capture = False
        self.u: Tensor | None = None
        self.f: Tensor | None = None

    def delta(self, u: Tensor) -> Tensor:
        assert self.weight is not None
        rows = self.features.features(u.reshape(-1, u.shape[-1])).double() @ self.weight
        return (self.scale * rows).to(u.dtype).reshape(*u.shape[:-1], -1)

    def _pre(self, _module: nn.Module, args: tuple) -> None:
        self.u = args[0]

    def _post(self, _module: nn.Module, _args: tuple, out: Tensor) -> Tensor:
        if self.capture:
            out = out.detach().requires_grad_(True)
            self.f = out
        elif self.weight is not None and self.scale:
            out = out + self.delta(self.u)
        return out

    @contextlib.contextmanager
    def installed(self) -> Iterator[Adapter]:
        site_in, site_out = ffn_sites(self.base)
        handles = [site_in.register_forward_pre_hook(self._pre),
                   site_out.register_forward_hook(self._post)]  # fmt: skip
        try:
            yield self
        finally:
            for h in handles:
                h.remove()
            self.u = self.f = None


def gradient_stats(
    base: BaseModel, adapter: Adapter, head: ClosedFormHead, ids: list[list[int]],
    labels: np.ndarray, batch_size: int, device: str,
) -> tuple[GramStats, float]:  # fmt: skip
    """Stream per-token (features of the block input, -∂L/∂block output) of real tokens; also
    the mean square of the block's output over those tokens."""
    stats = GramStats.zeros(adapter.features.n_features, base.d_model, device)
    f_sq = 0.0
    adapter.capture = True
    try:
        with adapter.installed(), torch.enable_grad():
            for idx in by_length(ids, batch_size):
                x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
                scores = head.scores(base.pooled(x, m))
                y = centred_one_hot(to_device(torch.from_numpy(labels[idx]), device))
                loss = 0.5 * ((scores - y) ** 2).sum()
                (grad,) = torch.autograd.grad(loss, adapter.f)
                real = m.bool()
                stats.update(adapter.features.features(adapter.u.detach()[real]), -grad[real])
                f_sq += float((adapter.f.detach()[real].double() ** 2).sum())
    finally:
        adapter.capture = False
    return stats, f_sq / max(1, stats.n * base.d_model)


def fit_adapter(
    base: BaseModel, fit: tuple[list, np.ndarray], dev: tuple[list, np.ndarray],
    cfg: LoraConfig, seed: int, device: str,
) -> FitResult:  # fmt: skip
    """The readout, the functional-gradient solve of the adapter, then the readout again on
    the adapted states for every η of ``cfg.adapter_etas``; the η of best dev accuracy is kept.
    The fit time covers every pass and solve, the selections included."""
    sync(device)
    t0 = time.perf_counter()
    args = (cfg.lambdas, cfg.kappa_max, seed, cfg.batch_size, device)
    readout = fit_closed_form(base, fit, dev, 0, *args)
    head = ClosedFormHead(base.d_model, 0, seed, device)
    head.weight = readout.weights["w_pil"]
    adapter = Adapter(base, cfg.pil_rank, seed, device)
    tg = time.perf_counter()
    st_fit, f_ms = gradient_stats(base, adapter, head, *fit, cfg.batch_size, device)
    st_dev, _ = gradient_stats(base, adapter, head, *dev, cfg.batch_size, device)
    sync(device)
    grad_seconds = time.perf_counter() - tg
    w_unit, ridge = solve_relative(st_fit, st_dev, cfg.lambdas, cfg.kappa_max)
    # mean square of h W over the fit tokens, from the Gram: tr(Wᵀ HᵀH W) / (n d)
    out_ms = float(torch.trace(w_unit.T @ st_fit.hth @ w_unit)) / max(1, st_fit.n * base.d_model)
    unit = math.sqrt(f_ms / out_ms) if out_ms > 0 else 0.0
    adapter.weight = w_unit
    best: tuple[float, float, FitResult] | None = None
    curve = []
    for eta in cfg.adapter_etas:
        adapter.scale = eta * unit
        with adapter.installed():
            res = fit_closed_form(base, fit, dev, 0, *args)
            dev_acc = float((res.predict(dev[0]) == dev[1]).mean())
        curve.append({"eta": eta, "dev_accuracy": dev_acc})
        if best is None or dev_acc > best[0]:
            best = (dev_acc, eta, res)
    assert best is not None
    dev_acc, eta, res = best
    scale = eta * unit
    sync(device)
    fit_seconds = time.perf_counter() - t0

    def predict(sents: list[list[int]]) -> np.ndarray:
        adapter.scale = scale
        with adapter.installed():
            return res.predict(sents)

    weights = {"w_adapter": w_unit * scale, "w_head": res.weights["w_pil"]}
    metrics = {
        "eta": eta, "lambda_rel": ridge.lam_rel, "kappa": ridge.kappa,
        "eigh_fallback": float(ridge.solver == "eigh"), "head_lambda_rel": res.metrics["lambda_rel"],
        "readout_dev_accuracy": float((readout.predict(dev[0]) == dev[1]).mean()),
        "n_tokens": float(st_fit.n), "grad_seconds": grad_seconds, "best_dev_accuracy": dev_acc,
        "fixed_params": float(base.d_model * cfg.pil_rank),
    }  # fmt: skip
    return FitResult(weights, predict, fit_seconds, metrics, curve)
