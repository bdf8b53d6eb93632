"""The three ways the SST-2 study fits a sentiment classifier on a frozen base model.

The seed (``003_*``, section 3) defines PIL-LoRA as ``W_adapted = W_frozen + H W_pil`` with
``H = GELU(x W_down)``, ``W_down`` a fixed random rank-``r`` projection and ``W_pil`` solved in
one pass by ridge on "residual targets", which it leaves undefined. For classification we
instantiate the one well-defined target, the label. What that fits is a closed-form head on
frozen features, not an adapter inside the model, and the tables call it so:

- ``pil_lora`` (the random-feature head): x -> row-standardised x̂ (zero mean, unit variance
  over its d coordinates, no parameters) -> H = [GELU(x̂ W_down), 1] with W_down ~ N(0, 1/d)
  fixed by the seed -> W_pil = (HᵀH + λI)⁻¹ HᵀY, Y the centred one-hot labels (±1/2). HᵀH and
  HᵀY are streamed in float64 (``ridge.GramStats``), never the rows; λ (relative to the mean
  diagonal of HᵀH) is picked on the dev split carved from GLUE train. No gradient step.
- ``ridge`` (the ridge readout): the same solve on H = [x̂, 1], without the random projection.
- ``pil_adapter`` (``pillm.lora.adapter``): the seed's in-layer adapter, a closed-form low-rank
  update inside the last FFN block whose target is the task loss's functional gradient.
- ``lora``: ``peft`` LoRA adapters on every linear map inside the blocks (or the attention
  projections alone, ``lora.lora_modules``) plus a trainable linear head on the ridge readout's
  input x̂, trained by AdamW on the cross-entropy (the gradient baseline), its
  learning rate (``lora.lrs``) and its number of steps (early stopping) chosen on the same dev
  split.

Each fit returns a ``FitResult``: its trainable weights, a predictor and its timings.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import binomtest
from torch import Tensor, nn

from pillm.core.adamw import AdamW
from pillm.core.log import Progress
from pillm.core.ridge import GramStats, solve_relative
from pillm.core.runtime import lr_at, sync
from pillm.lora.base import BaseModel, by_length, pad_batch, pooled_batches, to_device
from pillm.lora.config import LoraConfig

METHODS = ("pil_lora", "ridge", "pil_adapter", "lora")  # pil_adapter: pillm.lora.adapter
N_CLASSES = 2
# LoRA targets (peft's full-name regex match) per base kind and ``lora.lora_modules``:
# "attention": BERT's query/value projections, the pillm GPT's fused q/k/v projection (the
# analogue of GPT-2's c_attn, the LoRA paper's choice); "all_linear": every linear map inside
# the blocks (attention in and out, both FFN maps; the QLoRA recipe), never a head or pooler.
LORA_TARGETS: dict[tuple[str, str], str] = {
    ("encoder", "attention"): r".*encoder\.layer\.\d+\.attention\.self\.(query|value)",
    ("causal", "attention"): r".*blocks\.\d+\.attn\.qkv",
    ("encoder", "all_linear"): r".*encoder\.layer\.\d+\.(attention\.self\.(query|key|value)"
    r"|attention\.output\.dense|intermediate\.dense|output\.dense)",
    ("causal", "all_linear"): r".*blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(fc|proj))",
}


@dataclass
class FitResult:
    """Trainable weights (name -> tensor) of one fit, its timings and what else it recorded;
    ``predict`` gives class indices, ``scores`` (LoRA) the logits, (n, 2) float64."""

    weights: dict[str, Tensor]
    predict: Callable[[list[list[int]]], np.ndarray]
    fit_seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    curve: list[dict[str, float]] = field(default_factory=list)
    scores: Callable[[list[list[int]]], np.ndarray] | None = None


# ---------------------------------------------------------------- closed-form heads


def standardise_rows(x: Tensor) -> Tensor:
    """Each row to zero mean and unit variance over its coordinates (a parameter-free LayerNorm)."""
    return F.layer_norm(x, x.shape[-1:])


def centred_one_hot(labels: Tensor) -> Tensor:
    """One-hot targets minus 1/K: rows sum to zero (±1/2 for two classes), float64."""
    return F.one_hot(labels, N_CLASSES).double() - 1.0 / N_CLASSES


class ClosedFormHead:
    """H(x) = [GELU(x̂ W_down), 1] (``rank`` > 0, PIL-LoRA) or [x̂, 1] (``rank`` = 0, ridge control);
    scores = H(x) W with W solved by ridge."""

    def __init__(self, d: int, rank: int, seed: int, device: str):
        self.d, self.rank = d, rank
        gen = torch.Generator(device="cpu").manual_seed(seed)
        w = torch.randn(d, rank, generator=gen) / math.sqrt(d) if rank else None
        self.w_down = None if w is None else w.to(device)  # x̂ W_down ~ N(0, 1) per feature
        self.weight: Tensor | None = None

    @property
    def n_features(self) -> int:
        return (self.rank or self.d) + 1

    def features(self, x: Tensor) -> Tensor:
        z = standardise_rows(x.float())
        h = F.gelu(z @ self.w_down) if self.w_down is not None else z
        return torch.cat([h, torch.ones_like(h[:, :1])], dim=1)

    def scores(self, x: Tensor) -> Tensor:
        assert self.weight is not None, "solve the head first"
        return self.features(x).double() @ self.weight


def fit_closed_form(
    base: BaseModel, fit: tuple[list, np.ndarray], dev: tuple[list, np.ndarray], rank: int,
    lambdas: list[float], kappa_max: float, seed: int, batch_size: int, device: str,
) -> FitResult:  # fmt: skip
    """One streamed pass over the fit and dev rows, then one solve (no gradient step); λ is the
    grid value of least squared error on the dev rows."""
    head = ClosedFormHead(base.d_model, rank, seed, device)
    p = head.n_features
    stats = {s: GramStats.zeros(p, N_CLASSES, device) for s in ("fit", "dev")}
    capture = 0.0
    sync(device)
    t0 = time.perf_counter()
    for split, (ids, labels) in (("fit", fit), ("dev", dev)):
        n_batches = math.ceil(len(ids) / batch_size)
        it = iter(pooled_batches(base, ids, labels, batch_size, device))
        progress, done = Progress(f"streaming {split} rows", n_batches, "batches"), 0
        while True:
            progress.update(done)
            done += 1
            tc = time.perf_counter()
            batch = next(it, None)
            sync(device)
            capture += time.perf_counter() - tc
            if batch is None:
                break
            x, y = batch
            stats[split].update(head.features(x), centred_one_hot(y))
    ts = time.perf_counter()
    head.weight, ridge = solve_relative(stats["fit"], stats["dev"], lambdas, kappa_max)
    sync(device)
    t1 = time.perf_counter()

    @torch.no_grad()
    def predict(ids: list[list[int]]) -> np.ndarray:
        out = np.empty(len(ids), dtype=np.int64)
        for idx in by_length(ids, batch_size):
            x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
            out[idx] = head.scores(base.pooled(x, m)).argmax(1).cpu().numpy()
        return out

    metrics = {
        "capture_seconds": capture, "solve_seconds": t1 - ts, "lambda_rel": ridge.lam_rel,
        "kappa": ridge.kappa, "eigh_fallback": float(ridge.solver == "eigh"), "n_features": p,
        "fixed_params": base.d_model * rank,
    }  # fmt: skip
    return FitResult({"w_pil": head.weight}, predict, t1 - t0, metrics)


# ---------------------------------------------------------------- LoRA (gradient baseline)


class ReadoutHead(nn.Module):
    """LoRA's trainable readout: scores = W x̂ + b on the row-standardised pooled state x̂, the
    input of the ridge readout (``ClosedFormHead`` with rank 0), so the two heads differ only in
    how they are fitted. Zero-initialised: training starts at the uniform prediction."""

    def __init__(self, d: int):
        super().__init__()
        self.linear = nn.Linear(d, N_CLASSES)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(standardise_rows(x.float()))


def bucketed_epoch(
    lengths: list[int], batch_size: int, rng: np.random.Generator, pool: int = 50
) -> list[np.ndarray]:
    """One shuffled epoch of training batches of similar length: shuffle, sort each pool of
    ``pool`` batches by length, cut it into batches, shuffle the batches (less padding, still
    random; every index once)."""
    perm = rng.permutation(len(lengths))
    batches = []
    for i in range(0, len(perm), pool * batch_size):
        chunk = perm[i : i + pool * batch_size]
        chunk = chunk[np.argsort([lengths[j] for j in chunk], kind="stable")]
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def warmup_steps(steps: int) -> int:
    """Linear learning-rate warm-up of LoRA training: a tenth of the budget (then cosine to 0)."""
    return max(1, steps // 10)


def patience_from(cfg: LoraConfig) -> int:
    """The step after which evaluations count towards early stopping: the end of the warm-up
    or ``cfg.min_steps``, whichever is later (a run is never judged while its rate still rises
    or before its minimum budget)."""
    return max(warmup_steps(cfg.max_steps), cfg.min_steps)


class EarlyStop:
    """Best dev accuracy so far (strictly greater counts as better) and how many evaluations
    after step ``start`` have passed without improvement; ``done`` once ``patience`` such
    evaluations in a row brought none. An evaluation up to ``start`` can be the best, but
    never counts towards patience."""

    def __init__(self, patience: int, start: int = 0):
        self.patience, self.start = patience, start
        self.best, self.best_step, self.since = -math.inf, 0, 0

    def update(self, step: int, score: float) -> bool:
        """Record an evaluation; True when it is the new best."""
        if score > self.best:
            self.best, self.best_step, self.since = score, step, 0
            return True
        if step > self.start:
            self.since += 1
        return False

    @property
    def done(self) -> bool:
        return self.since >= self.patience


def chance_loss(labels: np.ndarray) -> float:
    """Cross-entropy (nats) of predicting every sentence by the class frequencies of ``labels``:
    the training loss of a classifier that learned nothing from its input (ln 2 when balanced)."""
    freq = np.bincount(labels, minlength=N_CLASSES) / max(1, len(labels))
    return float(-sum(f * math.log(f) for f in freq if f > 0))


def majority_rate(labels: np.ndarray) -> float:
    """Share of the most frequent class in ``labels``: the training accuracy of a classifier
    that learned nothing from its input (it predicts that class for every sentence)."""
    return float(np.bincount(labels, minlength=N_CLASSES).max() / max(1, len(labels)))


def trained(
    train_loss: float, chance: float, n_correct: int, n: int, majority: float, alpha: float
) -> tuple[bool, float]:
    """Did a gradient fit learn from its input: (trained, p). Trained when its kept weights'
    training loss (eval mode, on the ``n`` fit sentences) lies below ``chance`` and their
    ``n_correct`` beat the majority-class rate ``majority`` at a one-sided binomial test,
    p < ``alpha`` (p: the chance of ``n_correct`` or more right answers if each sentence were
    right with probability ``majority``, the most an input-blind classifier gets).

    Learning is judged against the majority class with a test whose power follows n, not by a
    fixed loss margin: a margin asks for a separation the features may not carry (where they
    support ~62 % accuracy, a calibrated classifier's loss lies only ~0.04 nats below chance),
    while a lead over the majority class too large for n sentences to give by luck is learning
    at whatever accuracy the features allow. Majority-class predictions, the collapse of a run
    stopped right after its warm-up, give p near 1/2 and fail."""
    if n <= 0 or not math.isfinite(train_loss):
        return False, math.nan
    p = float(binomtest(n_correct, n, majority, alternative="greater").pvalue)
    return bool(train_loss < chance and p < alpha), p


def fit_lora(
    base: BaseModel, fit: tuple[list, np.ndarray], dev: tuple[list, np.ndarray],
    cfg: LoraConfig, lr: float, seed: int, device: str, stop_at: int | None = None,
    target: float | None = None,
) -> FitResult:  # fmt: skip
    """peft LoRA on the maps ``cfg.lora_modules`` names (``LORA_TARGETS``) + a ``ReadoutHead``,
    AdamW on cross-entropy at peak learning rate ``lr`` for adapters and head alike (warm-up
    over a tenth of ``cfg.max_steps``, cosine decay to 0 at it); the base model's own dropout
    is active while it trains, as in the standard fine-tuning recipe.

    Without ``stop_at`` (model selection): every ``cfg.eval_every`` steps the dev accuracy is
    measured (clock stopped; scoring draws no random number and changes no weight) and the
    trainable weights of the best evaluation are kept; training stops after ``cfg.patience``
    evaluations without improvement, counted only after ``patience_from`` (the warm-up and
    ``cfg.min_steps``), or at ``cfg.max_steps``, and the fit ends holding the best
    evaluation's weights. ``curve``: step, training seconds, dev accuracy and the mean training
    loss since the previous evaluation. With ``target``, training also stops at the first
    evaluation whose dev accuracy reaches it (the speed benchmark; the pipeline never passes one).
    With ``stop_at``: exactly that many steps of the same schedule, no evaluation: the same
    seed reproduces the selection run's weights at that step (the determinism check).
    """
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    torch.manual_seed(seed)
    model = copy.deepcopy(base.model)
    lcfg = PeftLoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=LORA_TARGETS[(base.kind, cfg.lora_modules)],
    )  # fmt: skip
    model = inject_adapter_in_model(lcfg, model).to(device)  # freezes every non-adapter weight
    adapted = BaseModel(**{**base.__dict__, "model": model})
    head = ReadoutHead(base.d_model).to(device)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    named += [(f"head.{n}", p) for n, p in head.named_parameters()]
    opt = AdamW([p for _, p in named], lr=lr, weight_decay=cfg.weight_decay)
    ids, labels = fit
    gen = np.random.default_rng(seed)
    lengths = [len(s) for s in ids]
    queue: list[np.ndarray] = []
    total, bs = cfg.max_steps, cfg.train_batch_size
    warmup = warmup_steps(total)
    last = total if stop_at is None else min(stop_at, total)
    every = cfg.eval_every or total  # 0: one evaluation, after the last step

    @torch.no_grad()
    def scores(sents: list[list[int]]) -> np.ndarray:
        model.eval()
        out = np.empty((len(sents), N_CLASSES), dtype=np.float64)
        for idx in by_length(sents, cfg.batch_size):
            x, m = pad_batch([sents[i] for i in idx], base.pad_id, device)
            out[idx] = head(adapted.pooled(x, m)).double().cpu().numpy()
        return out

    def predict(sents: list[list[int]]) -> np.ndarray:
        return scores(sents).argmax(1)

    def snapshot() -> dict[str, Tensor]:
        return {n: p.detach().clone() for n, p in named}

    stop = EarlyStop(cfg.patience, patience_from(cfg))
    best: dict[str, Tensor] = {}
    curve: list[dict[str, float]] = []
    elapsed, best_seconds, losses, step = 0.0, 0.0, [], 0
    # The clock runs over the steps between evaluations and reads the GPU only there: a wait
    # after every step would leave the GPU idle between steps and time that idleness too.
    sync(device)
    t0 = time.perf_counter()
    progress, notes = Progress(f"LoRA lr {lr:g}", last), {}
    for step in range(1, last + 1):
        progress.update(step - 1, **notes)  # host values only: the last evaluation's
        model.train()
        if not queue:
            queue = bucketed_epoch(lengths, bs, gen)
        idx = queue.pop()
        x, m = pad_batch([ids[i] for i in idx], base.pad_id, device)
        y = to_device(torch.from_numpy(labels[idx]), device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, total, lr, warmup, 0.0)
        loss = F.cross_entropy(head(adapted.pooled(x, m)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if stop_at is None and (step == last or step % every == 0):
            sync(device)
            elapsed += time.perf_counter() - t0
            dev_acc = float((predict(dev[0]) == dev[1]).mean())
            train_loss = float(torch.stack(losses).mean())
            losses = []
            curve.append({"step": step, "fit_seconds": elapsed, "dev_accuracy": dev_acc,
                          "train_loss": train_loss})  # fmt: skip
            notes = {"dev_accuracy": dev_acc, "train_loss": train_loss}
            if stop.update(step, dev_acc):
                best, best_seconds = snapshot(), elapsed
            if stop.done or (target is not None and dev_acc >= target):
                break
            sync(device)  # the snapshot's copies belong to the evaluation
            t0 = time.perf_counter()
    if stop_at is None:  # end on the best evaluation's weights
        with torch.no_grad():
            for n, p in named:
                p.copy_(best[n])
        weights, fit_seconds = best, best_seconds
    else:  # no evaluation read the clock
        sync(device)
        elapsed += time.perf_counter() - t0
        weights, fit_seconds = snapshot(), elapsed
    windows = [c["train_loss"] for c in curve]  # mean training loss between evaluations
    metrics = {
        "lr": lr, "steps_run": float(step), "best_step": float(stop.best_step if stop_at is None
        else step), "best_dev_accuracy": stop.best if stop_at is None else math.nan,
        "run_seconds": elapsed, "warmup_steps": float(warmup),
        "patience_from": float(patience_from(cfg)),
        "final_loss": float(loss.item()) if step else math.nan,
        "train_loss_first": windows[0] if windows else math.nan,
        "train_loss_last": windows[-1] if windows else math.nan,
    }  # fmt: skip
    return FitResult(weights, predict, fit_seconds, metrics, curve, scores)


def choose_lr(runs: list[FitResult]) -> int:
    """Index of the run with the best dev accuracy (the first of equals: grid order decides)."""
    scores = [r.metrics["best_dev_accuracy"] for r in runs]
    return scores.index(max(scores))
