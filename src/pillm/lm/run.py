"""One LM run of any variant: gradient training, closed-form FFN solves, or a solve then training.

Writes the run folder: ``model.pt``, ``curve.parquet`` (gradient steps; empty for pure solves),
``solve.parquet`` (per layer and λ: held-out MSE, the chosen λ, κ, solver; per layer the chosen
map's held-out R², the target's held-out mean square, and the installed W_out's Frobenius norm
and nonzero entries), and ``metrics.json`` last, so a killed run never leaves a folder that looks
finished.
"""

from __future__ import annotations

import gc
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from pillm.core.config import ConfigError
from pillm.core.log import process_seconds, say
from pillm.core.records import (
    IDENTITY,
    config_hash,
    data_revisions,
    provenance,
    tidy_records,
    write_json,
    write_rows_parquet,
)
from pillm.core.runtime import (
    peak_memory_mb,
    resolve_device,
    seed_everything,
)
from pillm.core.selection import GridPick
from pillm.data.corpus import load_tokens
from pillm.data.lambada import LambadaSet, generate_samples, load_lambada, score_lambada
from pillm.lm.config import ExtrasParams, LMParams, ModelConfig, PILConfig
from pillm.lm.pil import (
    LayerSolves,
    frozen_copy,
    functional_gradient_step_search,
    make_distill_target,
    randomize_outputs,
    solve_all_layers,
    target_functional_gradient,
    target_propagation,
    target_residual,
)
from pillm.lm.train import as_test_metrics, fit, lm_metrics, split_scores
from pillm.lm.variants import VARIANTS
from pillm.models.checkpoint import load_checkpoint, save_checkpoint
from pillm.models.gpt import GPT, GPTConfig, attach_pil, freeze_ffns, matched_depth

CURVE_COLUMNS = ("step", "tokens", "lr", "train_loss", "val_loss")
_previous_end = 0.0  # process_seconds() when this process finished its previous run (0: none)
# fit() metrics a run records; compiled / cuda_graphs say which step path ran (train_step.py)
GRAD_RECORDS = ("tokens_per_s", "train_steps", "compiled", "cuda_graphs", "warmup_time_s",
                "train_loss_first", "train_loss_final")  # fmt: skip


def _dep_metrics(run_dir: str) -> dict[str, float]:
    rows = json.loads((Path(run_dir) / "metrics.json").read_text())
    return {r["metric"]: r["value"] for r in rows}


def variant_config(name: str, model_cfg: ModelConfig, vocab_size: int) -> GPTConfig:
    """The GPT config of a freshly initialised variant; a ``match_params`` variant gets the
    depth whose parameter count is closest to the matched variant's (models.gpt.matched_depth)."""

    def config(v: str) -> GPTConfig:
        spec = VARIANTS[v]
        return GPTConfig(
            vocab_size=vocab_size,
            **asdict(model_cfg),
            use_attn=spec.use_attn,
            use_ffn=spec.use_ffn,
            ffn_activation=spec.ffn_activation,
        )

    v = VARIANTS[name]
    return (
        config(name)
        if v.match_params is None
        else matched_depth(config(name), config(v.match_params))
    )


def build_model(
    name: str, model_cfg: ModelConfig, vocab_size: int, deps: dict[str, str], device: str
) -> tuple[GPT, float, int]:
    """The starting model, the gradient seconds and trainable parameters it already cost."""
    v = VARIANTS[name]
    if v.base is None:
        cfg = variant_config(name, model_cfg, vocab_size)
        model = GPT(cfg).to(device)
        if v.freeze_ffn:
            freeze_ffns(model)
        return model, 0.0, 0
    base = _dep_metrics(deps[v.base])
    model = load_checkpoint(Path(deps[v.base]) / "model.pt", device)
    return model, base["grad_time_s"], int(base["params_trainable"])


def solve_ffns(
    name: str, seed: int, model: GPT, arrays: dict, pil_cfg: PILConfig, deps: dict, device: str
) -> LayerSolves:
    """Attach PIL FFNs and solve them bottom-up with the variant's target."""
    v = VARIANTS[name]
    attach_pil(model, v.features, seed)
    step_search = None
    if v.target == "distill":
        teacher = frozen_copy(load_checkpoint(Path(deps[v.teacher]) / "model.pt", device))
        target = make_distill_target(teacher)
    elif v.target == "fgrad":
        target = target_functional_gradient
        step_search = functional_gradient_step_search(model, arrays["valid"], pil_cfg, device)
    else:
        target = {"residual": target_residual, "tp": target_propagation}[v.target]
    model.eval()
    return solve_all_layers(
        model, target, arrays["train"], arrays["valid"], pil_cfg, device, step_search
    )


def output_maps(model: GPT) -> list[tuple[float, int]]:
    """Per layer with a PIL FFN: the Frobenius norm and the nonzero entries of its W_out."""
    maps = [b.mlp.w_out for b in model.blocks if hasattr(b.mlp, "w_out")]
    return [(float(torch.linalg.norm(w.double())), int(torch.count_nonzero(w))) for w in maps]


def grid_metrics(prefix: str, pick: GridPick) -> dict[str, float]:
    """A selection's edge record as metrics: first pick on an edge, points added, final on edge."""
    return {
        f"{prefix}_edge_hit": float(pick.edge_hit),
        f"{prefix}_extensions": float(pick.extensions),
        f"{prefix}_on_edge": float(pick.on_edge),
    }


def run_variant(
    name: str,
    seed: int,
    params: dict[str, Any],
    tokens_dir: str,
    deps: dict[str, str],
    out_dir: str,
    device: str,
    test_split: bool = True,
    checkpoint: bool = True,
) -> dict[str, float]:
    """Build, solve and/or train one variant; write its run folder; return its metrics.

    ``params`` is the ``run-lm --params`` dict (sections model, train, pil), checked here once.
    ``test_split=False`` scores the held-out split only (a rate search's run, most of which no
    one reads; ``score_test`` adds the test metrics of the one kept); ``checkpoint=False`` writes
    no ``model.pt`` (a run whose weights nothing reads).
    """
    global _previous_end
    begin = _previous_end  # this run's share of the job starts where the previous run ended
    startup = process_seconds() - begin  # the first run: interpreter and imports
    v = VARIANTS[name]
    cfg = LMParams.from_dict(params)
    device = resolve_device(device)
    seed_everything(seed)
    say(f"run {name} seed {seed}: loading tokens, building the model on {device}")
    arrays, meta = load_tokens(tokens_dir)
    model, grad_time, trainable = build_model(name, cfg.model, meta["vocab_size"], deps, device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    solves, curve, extra = LayerSolves([], [], []), [], {}
    if v.solves:
        if cfg.pil is None:
            raise ConfigError(f"variant {name} solves FFNs: --params needs its 'pil' section")
        say(f"run {name} seed {seed}: solving {model.cfg.n_layer} FFN layers ({v.target} target)")
        solves = solve_ffns(name, seed, model, arrays, cfg.pil, deps, device)
        if v.random_out:
            randomize_outputs(model, seed)
        extra = {"pil_features": v.features, "pil_seed": seed}
    out_maps = output_maps(model)  # as installed: after an fgrad step or the randomisation
    if v.trains:
        grad, curve = fit(model, arrays, meta, cfg.train, seed, device)
        grad_time += grad["grad_time_s"]
        trainable += sum(p.numel() for p in model.parameters() if p.requires_grad)
        extra |= {k: grad[k] for k in GRAD_RECORDS}
    model.eval()
    say(f"run {name} seed {seed}: scoring the held-out{' and test splits' if test_split else ''}")
    fits = solves.fits
    solve_time = sum(f.gram_seconds + f.solve_seconds for f in fits)
    scores = lm_metrics(
        model, arrays, meta, cfg.train.eval_batch_size, device, not v.random_out,
        cfg.train.compile, test_split,
    )  # fmt: skip
    metrics = {
        **scores,
        "params_trainable": trainable,
        "grad_time_s": grad_time,
        "solve_time_s": solve_time,
        "train_time_s": grad_time + solve_time,
        **{k: val for k, val in extra.items() if k in GRAD_RECORDS},
    }
    for layer, (f, lam, step) in enumerate(zip(fits, solves.lambdas, solves.steps, strict=True)):
        metrics[f"kappa_l{layer}"] = f.kappa
        metrics[f"lambda_rel_l{layer}"] = f.lam_rel
        metrics |= grid_metrics(f"lambda_l{layer}", lam)
        metrics[f"step_l{layer}"] = 1.0 if step is None else step.value
        if step is not None:
            metrics |= grid_metrics(f"step_l{layer}", step)
    if fits:
        metrics["kappa_max"] = max(f.kappa for f in fits)
        metrics["solver_fallbacks"] = sum(f.solver != "cholesky" for f in fits)
        picks = solves.selections()
        metrics["pil_selections"] = len(picks)
        metrics["pil_edge_hits"] = sum(p.edge_hit for p in picks)
        metrics["pil_grid_extensions"] = sum(p.extensions for p in picks)
        metrics["pil_edge_selections"] = sum(p.on_edge for p in picks)
    if curve:
        curve[-1]["val_loss"] = metrics["val_loss"]

    out = Path(out_dir)
    scored = (
        f"test ppl {metrics['test_ppl']:.4g}" if test_split else f"val ppl {metrics['val_ppl']:.4g}"
    )
    say(f"run {name} seed {seed}: {scored}; writing {out}")
    identity = {
        "experiment": "lm",
        "variant": name,
        "seed": seed,
        "corpus": meta["corpus"],
        "tokenizer": meta["tokenizer"],
        "data_policy": meta["policy"],
    }
    if checkpoint:
        save_checkpoint(out / "model.pt", model, {"config": params, **extra})
    write_rows_parquet(out / "curve.parquet", curve or [dict.fromkeys(CURVE_COLUMNS)], identity)
    pil_cfg_grid = set(cfg.pil.lambdas) if cfg.pil is not None else set()
    sweep = [
        {
            "layer": layer,
            "lambda_rel": lr,
            "val_mse": mse,
            "chosen": lr == lam.value,
            "kappa": f.kappa,
            "solver": f.solver,
            "seconds": f.gram_seconds + f.solve_seconds,
            "extended": lr not in pil_cfg_grid,
            "edge_hit": lam.edge_hit,
            "extensions": lam.extensions,
            "on_edge": lam.on_edge,
            "heldout_r2": r2,
            "target_ms": target_ms,
            "w_out_fro": out_maps[layer][0],
            "w_out_nonzero": out_maps[layer][1],
            "random_out": v.random_out,
        }
        for layer, (f, lam, (r2, target_ms)) in enumerate(
            zip(fits, solves.lambdas, solves.r2, strict=True)
        )
        for lr, mse in f.curve.items()
    ]
    write_rows_parquet(out / "solve.parquet", sweep or [{"layer": None}], identity)
    context = {"config_hash": config_hash(params), **provenance(device, meta)}
    # this run's share of the job's wall time (its fixed cost is job - train - solve); the
    # first run of a process also pays the process start, the later ones reuse it
    _previous_end = process_seconds()
    metrics |= {"startup_time_s": startup, "job_time_s": _previous_end - begin}
    write_json(out / "metrics.json", tidy_records(identity, metrics, context))
    print(json.dumps({k: round(float(x), 4) for k, x in metrics.items()}), file=sys.stderr)
    return metrics


def score_test(out_dir: str, params: dict[str, Any], tokens_dir: str, device: str) -> None:
    """Add the test metrics to a run made with ``test_split=False``, scored from its
    ``model.pt`` as ``run_variant`` scores them; its ``metrics.json`` is rewritten in the order
    ``run_variant`` writes (test metrics first) and its ``job_time_s`` counts the pass."""
    global _previous_end
    begin = process_seconds()
    cfg = LMParams.from_dict(params)
    out = Path(out_dir)
    rows = json.loads((out / "metrics.json").read_text())
    if any(r["metric"].startswith("test_") for r in rows):
        raise ValueError(f"{out}: its metrics.json already has test metrics")
    arrays, meta = load_tokens(tokens_dir)
    device = resolve_device(device)
    model = load_checkpoint(out / "model.pt", device)
    say(f"run {out.parent.name}/{out.name}: scoring the test split of the kept run")
    scores = split_scores(model, arrays, meta, "test", cfg.train.eval_batch_size, device,
                          cfg.train.compile)  # fmt: skip
    del model
    _previous_end = process_seconds()
    template = {k: v for k, v in rows[0].items() if k not in ("metric", "value")}
    added = [
        {**template, "metric": k, "value": float(v)} for k, v in as_test_metrics(scores).items()
    ]
    for row in rows:
        if row["metric"] == "job_time_s":
            row["value"] += _previous_end - begin
    write_json(out / "metrics.json", added + rows)


def run_many(
    name: str,
    seeds: list[int],
    params: dict[str, Any] | list[dict[str, Any]],
    tokens_dir: str,
    deps: dict[str, str],
    out_dirs: list[str],
    device: str,
) -> None:
    """Several runs of one variant in one process: ``seeds[i]`` into ``out_dirs[i]`` with
    ``params`` (one dict for all, or one per run: a sensitivity grid); ``deps`` maps a variant it
    builds on to that variant's folder of runs (``<root>/seed<k>``, the same seed).

    One process for them all: a process's start-up, CUDA context and compile-cache loading cost
    more than one run's training, and later runs in the same process reuse the compiled step
    (``benchmarks/job_overhead.py`` measures both; figures in ``benchmarks/README.md``).
    """
    per_run = params if isinstance(params, list) else [params] * len(seeds)
    if not len(seeds) == len(out_dirs) == len(per_run):
        raise ConfigError(f"run-lm: {len(seeds)} seeds, {len(out_dirs)} --out-dirs and "
                          f"{len(per_run)} --params sets: give one of each per run")  # fmt: skip
    cuda = resolve_device(device).startswith("cuda")
    for seed, out_dir, p in zip(seeds, out_dirs, per_run, strict=True):
        run_deps = {d: str(Path(root) / f"seed{seed}") for d, root in deps.items()}
        run_variant(name, seed, p, tokens_dir, run_deps, out_dir, device)
        # the finished run's model, optimizer and graph are garbage now: hand their cached blocks
        # back, so that the process's GPU memory is one run's, not the sum of its runs'
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


# ---- LAMBADA and generation samples of finished runs (the lm_extras rule) --------------------
def unseen_targets(tok: Tokenizer, passages: list[str], train_tokens: np.ndarray) -> list[bool]:
    """Per passage: whether its target (the last word, encoded as LAMBADA scoring encodes it,
    ``" " + word``) holds a token that never occurs in the train split. A model trained on that
    split never saw such a token as a target (its logit was only ever pushed down), so those
    passages measure the split's coverage, not the model."""
    known = set(np.unique(train_tokens).tolist())
    return [not known.issuperset(tok.encode(" " + p.rpartition(" ")[2]).ids) for p in passages]


def run_extras(run_dirs: list[str], tokens_dir: str, params: dict[str, Any], device: str) -> None:
    """Write ``extras.json`` (tidy LAMBADA rows) and ``samples.json`` next to each run's metrics.

    One process for all seeds of a variant: interpreter, CUDA context, tokenizer and LAMBADA
    passages are paid once, not per run (the per-job fixed cost dominates these evaluations).
    """
    device = resolve_device(device)
    tok = Tokenizer.from_file(str(Path(tokens_dir) / "tokenizer.json"))
    cfg = ExtrasParams.from_dict(params)
    lam, data, smp = cfg.lambada, cfg.data, cfg.samples
    origin: dict = {}  # LAMBADA's revision: the extras records add it to the run's data
    passages = load_lambada(data.source, data.local_dir, lam.max_examples, data.revisions, origin)
    lambada_rev = json.loads(data_revisions({"revisions": origin}))
    unseen = unseen_targets(tok, passages, np.load(Path(tokens_dir) / "train.npy"))
    seen = [p for p, u in zip(passages, unseen, strict=True) if not u]
    lambada = lambada_seen = None  # encoded and on the device once, for the first run's context
    for run_dir in run_dirs:
        run = Path(run_dir)
        records = json.loads((run / "metrics.json").read_text())
        identity = {k: records[0][k] for k in IDENTITY}
        context = {k: v for k, v in records[0].items() if k not in (*IDENTITY, "metric", "value")}
        read = {**json.loads(context.get("data_revisions", "{}")), **lambada_rev}
        context["data_revisions"] = json.dumps(read, sort_keys=True)
        say(f"{run}: LAMBADA ({len(passages)} passages) and samples")
        model = load_checkpoint(run / "model.pt", device)
        if lambada is None or lambada.context != model.cfg.context:
            lambada = LambadaSet.build(tok, passages, model.cfg.context, lam.batch_size, device)
            lambada_seen = (
                LambadaSet.build(tok, seen, model.cfg.context, lam.batch_size, device)
                if seen
                else None
            )
        metrics = score_lambada(model, lambada)
        # beside it: the share of passages no model of this train split can get right, and the
        # accuracy on the others
        metrics["lambada_oov_share"] = sum(unseen) / len(unseen)
        metrics["lambada_n_seen"] = float(len(seen))
        metrics["lambada_acc_seen"] = (
            score_lambada(model, lambada_seen)["lambada_acc"]
            if lambada_seen is not None
            else float("nan")
        )
        samples = generate_samples(
            model, tok, list(smp.prompts), smp.max_new_tokens, seed=identity["seed"], device=device
        )
        # the process's peak so far (what the rule's gpu_mem_mb must cover); named apart from
        # the training run's peak_memory_mb, which the aggregate reads beside it
        metrics["extras_peak_memory_mb"] = peak_memory_mb(device)
        write_json(run / "samples.json", [{**identity, **s} for s in samples])
        write_json(run / "extras.json", tidy_records(identity, metrics, context))
