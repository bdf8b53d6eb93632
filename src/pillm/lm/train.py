"""Gradient training of a GPT: ``fit`` (AdamW steps) and ``lm_metrics`` (the finished model).

AdamW (fused on CUDA) with linear warm-up and cosine decay; bf16 autocast on CUDA, float32 on
CPU. The whole train split lives on the device and each epoch visits every non-overlapping
window once in a seeded random order. Timing is honest: the clock is synchronised, and tokens/s
excludes the first ``warmup_steps_timing`` steps (allocator and kernel warm-up).
"""

from __future__ import annotations

import time

import torch

from pillm.core.log import Progress, say
from pillm.core.runtime import deterministic, lr_at, peak_memory_mb, sync, tf32
from pillm.lm.config import TrainConfig
from pillm.lm.train_step import StepOptions, TrainStep
from pillm.models.evaluate import evaluate_lm
from pillm.models.gpt import GPT


@tf32(True)  # the training only: a PIL solve later in the process sees the switch restored
def fit(
    model: GPT,
    arrays: dict[str, torch.Tensor],
    meta: dict,
    train_cfg: TrainConfig,
    seed: int,
    device: str,
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """AdamW on every parameter with ``requires_grad`` (buffers, e.g. solved FFNs, stay fixed).

    TF32 matmuls on CUDA (the switch does nothing on CPU) for the training only, restored
    afterwards: the next seed of a job captures its PIL solve's features in full float32.
    ``train.deterministic``: deterministic kernels on CUDA, strict (a rerun gives the same model)."""
    on_cuda = device.startswith("cuda")
    with deterministic(on_cuda and train_cfg.deterministic, strict=True):
        T, B = model.cfg.context, train_cfg.batch_size
        amp = torch.bfloat16 if on_cuda else None
        data = arrays["train"].to(device)
        n_windows = (len(data) - 1) // T
        if n_windows < B:
            raise ValueError(f"train split has {n_windows} windows of {T} tokens < batch_size {B}")
        steps_per_epoch = n_windows // B
        total_steps = steps_per_epoch * train_cfg.epochs
        if train_cfg.max_steps:
            total_steps = min(total_steps, train_cfg.max_steps)
        warmup = max(1, round(train_cfg.warmup_frac * total_steps))
        step_fn = TrainStep(model, train_cfg, device, StepOptions.from_config(train_cfg, device))
        gen = torch.Generator(device="cpu").manual_seed(seed)
        offsets = torch.arange(T + 1, device=device)

        curve: list[dict[str, float]] = []
        losses = []
        step, t_start, t_timed, timed_from = 0, None, 0.0, train_cfg.warmup_steps_timing
        t_eval = 0.0  # periodic validation inside the timed window, excluded from tokens/s
        compiled = train_cfg.compile and on_cuda  # the evaluation's scores too (CUDA only)
        eval_args = (T, train_cfg.eval_batch_size, meta["bytes"]["valid"], amp, compiled)
        sync(device)
        t0 = time.perf_counter()
        say(f"train: {total_steps} steps of {B} x {T} tokens on {device}")
        # step counts and the last held-out loss only: the training losses stay on the device
        progress, notes = Progress("train", total_steps, per_unit=("tokens", B * T)), {}
        model.train()
        while step < total_steps:
            order = torch.randperm(n_windows, generator=gen)[: steps_per_epoch * B].to(device) * T
            for b in range(steps_per_epoch):
                if step == timed_from:
                    sync(device)
                    t_start = time.perf_counter()
                idx = order[b * B : (b + 1) * B, None] + offsets  # (B, T+1)
                chunk = data[idx]  # inputs chunk[:, :-1], targets chunk[:, 1:]
                lr = lr_at(step, total_steps, train_cfg.lr, warmup, train_cfg.min_lr_frac)
                losses.append(step_fn(chunk, lr))  # a device tensor: no host sync per step
                curve.append({"step": step, "tokens": (step + 1) * B * T, "lr": lr})
                step += 1
                progress.update(step, **notes)
                every = train_cfg.eval_every
                if every and step % every == 0 and step < total_steps:
                    sync(device)  # finish queued training work before the eval clock
                    t_eval_start = time.perf_counter()
                    curve[-1]["val_loss"] = evaluate_lm(model, arrays["valid"], *eval_args)["loss"]
                    notes["val_loss"] = curve[-1]["val_loss"]
                    if t_start is not None:
                        t_eval += time.perf_counter() - t_eval_start
                if step >= total_steps:
                    break
        sync(device)
        t_end = time.perf_counter()
        for row, loss in zip(curve, torch.stack(losses).float().cpu().tolist(), strict=True):
            row["train_loss"] = loss
        timed_steps = total_steps - timed_from
        if t_start is not None and timed_steps > 0:
            t_timed = t_end - t_start - t_eval
        steady_step = t_timed / timed_steps if t_timed > 0 else float("nan")
        say(
            f"train: {total_steps} steps in {t_end - t0:.1f} s, loss {curve[0]['train_loss']:.4g}"
            f" -> {curve[-1]['train_loss']:.4g}"
        )
        metrics = {
            "train_steps": total_steps,
            "train_tokens": total_steps * B * T,
            "grad_time_s": t_end - t0,
            "tokens_per_s": timed_steps * B * T / t_timed if t_timed > 0 else float("nan"),
            # the first warmup_steps_timing steps beyond their steady-state share: compilation,
            # CUDA graph capture, allocator warm-up (the per-job fixed cost inside training)
            "warmup_time_s": (t_start - t0) - timed_from * steady_step
            if t_start is not None
            else float("nan"),
            **step_fn.path(),  # compiled / cuda_graphs: 1 where that path ran (CUDA only)
            **loss_fall([row["train_loss"] for row in curve]),
        }
        return metrics, curve


def loss_fall(losses: list[float]) -> dict[str, float]:
    """Where a run's training loss started and ended: the first step's (the model as it entered
    training, before any update) and the mean over the last tenth of the steps (at least one; a
    single batch's loss is noisy). The aggregation calls a run trained when the second lies
    ``lm.trained_margin`` nats or more below the first (``pillm.lm.aggregate``)."""
    k = max(1, len(losses) // 10)
    return {"train_loss_first": losses[0], "train_loss_final": sum(losses[-k:]) / k}


def split_scores(
    model: GPT, arrays: dict, meta: dict, split: str, eval_batch_size: int, device: str,
    compiled: bool = False,
) -> dict[str, float]:  # fmt: skip
    """``evaluate_lm`` of a finished model on one split ("valid" or "test"), as every run
    scores it: bfloat16 autocast and compiled scores (``train.compile``) on CUDA only."""
    cuda = device.startswith("cuda")
    amp = torch.bfloat16 if cuda else None
    return evaluate_lm(model, arrays[split], model.cfg.context, eval_batch_size,
                       meta["bytes"][split], amp, compiled and cuda)  # fmt: skip


def as_test_metrics(scores: dict[str, float]) -> dict[str, float]:
    """The test split's entries of a run's metrics, from its ``split_scores``."""
    return {f"test_{k}": scores[k] for k in ("loss", "ppl", "acc", "bpb")}


def lm_metrics(
    model: GPT, arrays: dict, meta: dict, eval_batch_size: int, device: str, solved: bool = True,
    compiled: bool = False, test: bool = True,
) -> dict:  # fmt: skip
    """Test and held-out metrics plus parameter counts of a finished model (``test=False``:
    the held-out split only, for a run whose test score may never be read).

    The PIL output maps (``w_out`` buffers) count as solved parameters by their nonzero entries
    (a map solved for the residual target is exactly 0: it adds nothing), ``params_out_maps``
    by their size; ``solved=False`` (random output maps, the control of a solve) counts them
    as fixed random parameters instead."""
    val = split_scores(model, arrays, meta, "valid", eval_batch_size, device, compiled)
    scored = {}
    if test:
        scored = as_test_metrics(
            split_scores(model, arrays, meta, "test", eval_batch_size, device, compiled)
        )
    out_maps = [b for n, b in model.named_buffers() if n.endswith("w_out")]
    size = sum(b.numel() for b in out_maps)
    fixed = sum(b.numel() for n, b in model.named_buffers() if n.endswith(("w_in", "b_in")))
    fixed += sum(p.numel() for p in model.parameters() if not p.requires_grad)  # frozen FFNs
    nonzero = sum(int(torch.count_nonzero(b)) for b in out_maps) if solved else 0
    fixed += 0 if solved else size
    return {
        **scored,
        "val_loss": val["loss"],
        "val_ppl": val["ppl"],
        "params_total": model.num_params() + size,
        "params_non_embedding": model.num_params(non_embedding=True) + size,
        "params_solved": nonzero,
        "params_out_maps": size,
        "params_fixed_random": fixed,
        "model_layers": model.cfg.n_layer,
        "peak_memory_mb": peak_memory_mb(device),
    }
