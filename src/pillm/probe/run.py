"""One probe job: how linear is each FFN block of one model on one corpus?

Rows come from the corpus's test split, cut into windows of ``seq_len`` tokens (every
``holdout_every``-th batch held out). Fits, scores, swaps and the gradient check use the rows
the row policy ``probe.rows`` keeps (``pillm.probe.masks``); the all-rows fit is recorded
beside. On "downstream" corpora (``probe.swap_corpora``) the job also swaps each block, one at
a time, for its closed-form linear fit and for a truncated-SVD version of that fit
(``low_rank_factor`` x fewer weights than the dense map), and measures the change on the
validation split: perplexity for causal LMs, and for an encoder (no LM head) the stated proxy
``emb_cos_dist`` = mean 1 - cos(mean-pooled final states, swapped vs intact). There it also
trains the same linear map by AdamW on a bounded sample of rows and scores it against the
closed form fitted on the same rows (the under-convergence check).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pillm.core.adamw import AdamW
from pillm.core.log import say
from pillm.core.records import (
    IDENTITY,
    provenance,
    tidy_records,
    write_json,
    write_rows_parquet,
)
from pillm.core.ridge import GramStats, r2_score_from_stats
from pillm.core.runtime import peak_memory_mb, sync, tf32
from pillm.models.pretrained import ProbeModel, own_seed
from pillm.probe.capture import _forward, capture_ffn_io, ffn_modules, model_family
from pillm.probe.config import ProbeConfig
from pillm.probe.fit import _solve, _with_ones, probe_model
from pillm.probe.masks import RowMask, describe, row_mask
from pillm.probe.swap import (
    default_low_rank,
    linear_replacement,
    low_rank_params,
    low_rank_replacement,
    record_block_outputs,
    replay_below,
    swap_ffns,
)

# Per block, beside R²_lin on the rows the policy keeps: the same on all rows and without the
# policy's massive-activation rule, the bootstrap intervals over fitting and held-out windows
# (pillm.probe.refit), where the held-out variance sits (pillm.probe.variance).
PROBE_ROW_KEYS = (
    "r2_lin_all", "r2_lin_with_massive", "r2_lin_lo", "r2_lin_hi", "r2_lin_all_lo",
    "r2_lin_all_hi", "n_fit_windows", "n_heldout_windows", "n_excluded_rows", "n_massive_rows",
    "excluded_share", "outlier_k", "outlier_share", "r2_no_outliers", "outlier_features",
    "outlier_share_all", "r2_no_outliers_all",
)  # fmt: skip


def token_windows(pm: ProbeModel, text: str, seq_len: int, max_windows: int) -> Tensor:
    """Up to ``max_windows`` non-overlapping windows (n, seq_len) of the text's token ids.

    Encoders get [bos] + seq_len - 2 ids + [eos] per window, the input they were trained on.
    """
    ids = torch.from_numpy(pm.encode(text).astype(np.int64))
    body = seq_len - 2 if pm.kind == "encoder" else seq_len
    n = min(len(ids) // body, max_windows)
    if n < 2:
        raise ValueError(f"{pm.name}: text gives {len(ids)} tokens, fewer than 2 windows of {body}")
    win = ids[: n * body].view(n, body)
    if pm.kind == "encoder":
        ends = [torch.full((n, 1), t, dtype=torch.long) for t in (pm.bos, pm.eos)]
        win = torch.cat([ends[0], win, ends[1]], dim=1)
    return win


def _batches(win: Tensor, batch_size: int) -> list[Tensor]:
    return list(win.split(batch_size))


@torch.no_grad()
def _logits(model: nn.Module, x: Tensor) -> Tensor:
    out = model(x)
    return (out[0] if isinstance(out, tuple) else out.logits).float()


@torch.no_grad()
def perplexity(model: nn.Module, batches: list[Tensor], device: str) -> float:
    """exp(mean next-token NLL) over every position after the first of each window."""
    nll, n = 0.0, 0
    for x in batches:
        x = x.to(device)
        logits = _logits(model, x)[:, :-1]
        nll += float(F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum"))
        n += x[:, 1:].numel()
    return math.exp(nll / n)


@torch.no_grad()
def pooled_embeddings(model: nn.Module, batches: list[Tensor], device: str) -> Tensor:
    """Mean-pooled final hidden states (n, d) of an encoder (the windows have no padding)."""
    return torch.cat(
        [model(input_ids=x.to(device)).last_hidden_state.float().mean(1) for x in batches]
    )


class SwapMetric:
    """Perplexity (causal) or the embedding proxy (encoder) of the model as it is now
    (``__call__``), or with one block's FFN swapped (``swapped``).

    The intact pass records every block's output, so a swap at block i replays block i-1's
    output instead of recomputing the blocks below i (``pillm.probe.swap.replay_below``): the
    same bits as a whole forward, at the cost of the blocks from i on (on average half the
    model's blocks per swap). The recording holds every block's output over the evaluation
    windows: blocks x eval_windows x seq_len x d floats (SmolLM2 at the paper's 64 windows of
    128 tokens: 0.57 GB)."""

    def __init__(self, pm: ProbeModel, batches: list[Tensor], device: str):
        self.pm, self.batches, self.device = pm, batches, device
        self.name = "ppl" if pm.kind == "causal" else "emb_cos_dist"
        with record_block_outputs(pm.model) as recorded:
            self.reference = None if pm.kind == "causal" else self._embed()
            self.base = self()
        # One intact pass's outputs (an encoder ran two: the reference, then the base).
        self.recorded = [outs[: len(batches)] for outs in recorded]

    def swapped(self, layer: int, replacement: nn.Module) -> float:
        """The metric with block ``layer``'s FFN replaced by ``replacement``."""
        below = self.recorded[layer - 1] if layer else None
        with swap_ffns(self.pm.model, {layer: replacement}), \
                replay_below(self.pm.model, layer, below):  # fmt: skip
            return self()

    def _embed(self) -> Tensor:
        return pooled_embeddings(self.pm.model, self.batches, self.device)

    def __call__(self) -> float:
        if self.pm.kind == "causal":
            return perplexity(self.pm.model, self.batches, self.device)
        return float((1 - F.cosine_similarity(self._embed(), self.reference, dim=1)).mean())


def _spread(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n), first and last included."""
    return sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(min(k, n))})


def sample_rows(
    model: nn.Module, batches: list[Tensor], layers: list[int], rows: int, holdout_every: int,
    device: str, mask: RowMask | None = None,
) -> dict[int, tuple[Tensor, Tensor]]:  # fmt: skip
    """The first ``rows`` training rows (never a held-out batch) of each layer's FFN that the
    row policy ``mask`` keeps."""
    got: dict[int, list[tuple[Tensor, Tensor]]] = {i: [] for i in layers}
    n = 0
    with torch.no_grad(), capture_ffn_io(model, layers) as cap:
        for b, x in enumerate(batches):
            if (b + 1) % holdout_every == 0:
                continue
            _forward(model, x, cap, device)
            keep = None if mask is None else mask(x).reshape(-1).to(device)
            for i, (xi, yi) in cap.pop().items():
                if mask is not None:
                    k = mask.rows(keep, yi)
                    xi, yi = xi[k], yi[k]
                got[i].append((xi.float(), yi.float()))
            n += x.numel() if keep is None else int(keep.sum())
            if n >= rows:
                break
    return {
        i: (torch.cat([a for a, _ in v])[:rows], torch.cat([b for _, b in v])[:rows])
        for i, v in got.items()
    }


def gradient_fit(
    x: Tensor, y: Tensor, heldout: GramStats, steps: int, lr: float, batch_size: int, seed: int
) -> list[dict[str, float]]:
    """AdamW on the MSE of a zero-initialised affine map; held-out R² at log-spaced steps."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    lin = nn.Linear(x.shape[1], y.shape[1], device=x.device)
    nn.init.zeros_(lin.weight)
    nn.init.zeros_(lin.bias)
    opt = AdamW(lin.parameters(), lr=lr, weight_decay=0.0)
    marks = sorted({0, steps, *(int(10**e) for e in np.arange(0, math.log10(max(steps, 1)), 0.5))})
    curve = []
    for step in range(steps + 1):
        if step in marks:
            w = torch.cat([lin.weight.T, lin.bias[None]]).detach().double()
            curve.append({"step": step, "r2_heldout": r2_score_from_stats(w, heldout)[0]})
        if step == steps:
            break
        idx = torch.randint(0, x.shape[0], (batch_size,), generator=gen).to(x.device)
        with torch.enable_grad():
            loss = F.mse_loss(lin(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
    return curve


@tf32(False)  # float32 rows: TF32 would blur the LayerNorm null direction
def run_probe(
    pm: ProbeModel,
    corpus: str,
    fit_text: str,
    eval_text: str,
    cfg: ProbeConfig,
    device: str,
    swaps: bool,
    out_dir: str,
    data: dict[str, Any],
    load_seconds: float,
) -> None:
    """Probe the FFN blocks of ``pm`` (every one, or its ``cfg.max_blocks`` entry's count spread
    over depth) on one corpus; write blocks/gradient parquet + metrics. ``data``: the corpus
    meta.json (its data policy and revisions)."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    model = pm.model.to(device)
    hold = cfg.holdout_every
    fit = _batches(token_windows(pm, fit_text, cfg.seq_len, cfg.fit_windows), cfg.batch_size)
    if len(fit) < hold:
        raise ValueError(
            f"{pm.name} on {corpus}: {len(fit)} batches of probe.batch_size windows, but every "
            f"{hold}th is held out: raise probe.fit_windows (or the corpus is too short)"
        )
    t0 = time.perf_counter()
    mask = row_mask(cfg.rows, pm.special_ids)
    modules = ffn_modules(model)
    n_layers = len(modules)
    most = cfg.max_blocks.get(pm.group)
    probed = _spread(n_layers, most) if most else None
    blocks = probe_model(
        model, fit, device, hold, cfg.bilinear_rank, layers=probed, row_mask=mask,
        outlier_k=cfg.outlier_features, resamples=cfg.refit_resamples,
        seed=own_seed(pm.name) or 0,
    )  # fmt: skip
    sync(device)
    capture_seconds = time.perf_counter() - t0
    rows = []
    for rec in blocks:
        i, d_in, d_out = rec["layer"], rec["d_in"], rec["d_out"]
        rank = default_low_rank(d_in, d_out, cfg.low_rank_factor)
        rows.append(
            {
                "layer": i, "n_layers": n_layers, "depth": i / max(n_layers - 1, 1),
                "name": rec["name"],
                **{k: rec[k] for k in (
                    "r2_lin", "r2_feature_median", "effective_rank", "map_rank", "r2_bilinear",
                    "bilinear_gain", "bilinear_rank", "n_train_rows", "n_heldout_rows",
                    "d_in", "d_out", "solver", "kappa", *PROBE_ROW_KEYS,
                )},
                "row_policy": describe(cfg.rows),
                "ffn_params": sum(p.numel() for p in modules[i][1].parameters()),
                "linear_params": (d_in + 1) * d_out,
                "lowrank_params": low_rank_params(d_in, d_out, rank), "lowrank_rank": rank,
                "swap_metric": "ppl" if pm.kind == "causal" else "emb_cos_dist",
                "base_value": None, "swap_linear": None, "swap_lowrank": None,
                "delta_linear": None, "delta_lowrank": None,
                "grad_r2": None, "grad_closed_r2": None, "grad_steps": None,
                "grad_rows": None, "grad_lr": None,
            }
        )  # fmt: skip
    curves: list[dict[str, Any]] = []
    swap_seconds = grad_seconds = 0.0
    if swaps:
        t1 = time.perf_counter()
        ev = token_windows(pm, eval_text, cfg.seq_len, cfg.eval_windows)
        metric = SwapMetric(pm, _batches(ev, cfg.batch_size), device)
        say(f"probe: zero-shot swaps of {len(blocks)} blocks, linear and low-rank")
        for n, (rec, row) in enumerate(zip(blocks, rows, strict=True), 1):
            say(f"probe: swaps {n}/{len(blocks)} (layer {rec['layer']})")
            W = rec["W"].to(device)
            for kind, repl in (
                ("linear", linear_replacement(W)),
                ("lowrank", low_rank_replacement(W, row["lowrank_rank"])),
            ):
                value = metric.swapped(rec["layer"], repl)
                row.update({f"swap_{kind}": value, f"delta_{kind}": value - metric.base})
            row["base_value"] = metric.base
        swap_seconds = time.perf_counter() - t1
        t2 = time.perf_counter()
        g = cfg.gradient
        layers = [blocks[j]["layer"] for j in _spread(len(blocks), g.layers)]
        say(f"probe: gradient fits of layers {layers}, {g.steps} AdamW steps each")
        sampled = sample_rows(model, fit, layers, g.rows, hold, device, mask)
        by_layer = {rec["layer"]: rec for rec in blocks}
        row_of = {row["layer"]: row for row in rows}
        for i, (x, y) in sampled.items():
            stats = GramStats.zeros(x.shape[1] + 1, y.shape[1], device)
            stats.update(_with_ones(x.double()), y)
            closed = r2_score_from_stats(_solve(stats, 0.0, None).weight, by_layer[i]["heldout"])[0]
            seed = own_seed(pm.name) or 0
            curve = gradient_fit(x, y, by_layer[i]["heldout"], g.steps, g.lr, g.batch_size, seed)
            curves += [
                {"layer": i, "depth": row_of[i]["depth"], "closed_r2": closed, **c} for c in curve
            ]
            row_of[i].update(
                grad_r2=curve[-1]["r2_heldout"], grad_closed_r2=closed, grad_steps=g.steps,
                grad_rows=x.shape[0], grad_lr=g.lr,
            )  # fmt: skip
        grad_seconds = time.perf_counter() - t2
    n_rows = blocks[0]["n_train_rows"] + blocks[0]["n_heldout_rows"]
    identity = {
        "model": pm.name, "model_group": pm.group, "model_label": pm.label,
        "family": model_family(model), "kind": pm.kind, "seed": own_seed(pm.name), "corpus": corpus,
    }  # fmt: skip
    out = Path(out_dir)
    write_rows_parquet(out / "blocks.parquet", rows, identity)
    gid = {k: identity[k] for k in ("model", "model_group", "model_label", "corpus")}
    write_rows_parquet(out / "gradient.parquet", curves, gid)
    job = {
        "load_seconds": load_seconds,
        "capture_fit_seconds": capture_seconds,
        "rows_per_s": n_rows / capture_seconds,
        "swap_seconds": swap_seconds,
        "gradient_seconds": grad_seconds,
        "peak_mem_mb": peak_memory_mb(device),
        "n_rows": n_rows,
        "n_layers": n_layers,
        "n_probed_blocks": len(blocks),
    }
    run_identity = {
        "experiment": "probe", "variant": pm.name, "seed": identity["seed"], "corpus": corpus,
        "tokenizer": pm.label, "data_policy": data["policy"],
    }  # fmt: skip
    assert set(run_identity) == set(IDENTITY)
    context = {**provenance(device, data), "model_group": pm.group, "model_label": pm.label}
    context["note"] = pm.note
    write_json(out / "metrics.json", tidy_records(run_identity, job, context))


def probe_job(
    model_name: str,
    corpus: str,
    corpus_dir: str,
    cfg: dict[str, Any],
    device: str,
    out_dir: str,
    checkpoint: str | None = None,
    tokenizer_json: str | None = None,
) -> None:
    """Load the model and the corpus's splits (as written by prepare_corpus), then probe.

    ``cfg`` is the config's probe section (a dict, checked here once into ProbeConfig)."""
    import json

    from pillm.core.runtime import resolve_device
    from pillm.models.pretrained import load_probe_model

    probe = ProbeConfig.from_dict(cfg, "probe")
    device = resolve_device(device)
    t0 = time.perf_counter()
    pm = load_probe_model(model_name, probe.hub_models, checkpoint, tokenizer_json)
    load_seconds = time.perf_counter() - t0
    context = getattr(getattr(pm.model, "cfg", None), "context", None)
    if context is not None and probe.seq_len > context:
        raise ValueError(
            f"probe.seq_len = {probe.seq_len} exceeds {model_name}'s context ({context}, "
            "model.context in the config): lower probe.seq_len"
        )
    d = Path(corpus_dir)
    meta = json.loads((d / "meta.json").read_text())
    texts = {s: (d / f"{s}.txt").read_text(encoding="utf-8") for s in ("test", "valid")}
    run_probe(
        pm, corpus, texts["test"], texts["valid"], probe, device,
        swaps=corpus in probe.swap_corpora, out_dir=out_dir, data=meta,
        load_seconds=load_seconds,
    )  # fmt: skip
