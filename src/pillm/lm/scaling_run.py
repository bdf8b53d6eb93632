"""The scaling study's jobs that train: one point's every run (``scaling-point``) and the token
splits a point trains on (``scaling-tokens``).

A point's job runs the LM trainer (``pillm.lm.run.run_variant``, what ``run-lm`` runs) in one
process, so start-up, CUDA context and compiled steps are paid once per point and shape:

1. per learning-rate family, its first member at the first seed over ``lrs``, the rate with
   the lowest held-out (validation) loss kept; a pick on an edge of the grid adds a point
   beyond it (``search_grid``, at most ``lr_extend`` per side) and the record says so. A search
   run scores the held-out split only; the kept run's test split is scored after the pick,
   from its checkpoint (only its score is read; WikiText-2's test split, 296k tokens against
   the train split's 232k, was a sixth of a full-data search run's token passes, a backward
   pass counted as two);
2. every other (variant, seed) at its family's rate; the search's run at the chosen rate is
   the family's first-seed run (moved, not repeated).

Run folders are ``<out>/<variant>/seed<k>/`` (metrics.json, curve.parquet, solve.parquet); after
the last run the job gathers them into ``<out>/runs.parquet`` and ``<out>/curves.parquet`` and
writes ``<out>/lr.json`` (every family's search), the files its rule declares. No checkpoint is
kept: the search's are deleted after its pick, the other runs write none.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pillm.core.log import say
from pillm.core.records import atomic_path, write_json
from pillm.core.selection import GridPick, search_grid
from pillm.lm.config import ScalingPointParams, ScalingTokensParams

SEARCH_DIR = "lr_search"  # scratch folder of a point's rate search, removed at the end


def with_lr(run: dict[str, Any], lr: float) -> dict[str, Any]:
    """A variant's run-lm params with ``train.lr`` set."""
    return {**run, "train": {**run["train"], "lr": lr}}


def _score(metrics: dict[str, float]) -> float:
    """Held-out loss of a search run; a diverged run (NaN) scores worst."""
    loss = float(metrics["val_loss"])
    return loss if math.isfinite(loss) else math.inf


def _finish_run(cuda: bool) -> None:
    """Hand the run's GPU memory back before the next run."""
    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def pick_record(
    pick: GridPick, scores: dict[float, dict[str, float]], members: list[str], seed: int
) -> dict[str, Any]:
    """lr.json's entry of one family: its choice, grid, edge record and every search run."""
    return {
        "selector": members[0],
        "members": members,
        "seed": seed,
        "lr": pick.value,
        "grid": list(pick.grid),
        "edge_hit": pick.edge_hit,
        "extensions": pick.extensions,
        "on_edge": pick.on_edge,
        "runs": [{"lr": lr, **m} for lr, m in sorted(scores.items())],
    }


def run_point(
    params: dict[str, Any], tokens: list[str], runs: str, curves: str, lr: str, device: str
) -> None:
    """Every run of one scaling point (see the module docstring): the token splits are the
    folder of ``tokens``; the run folders go in the folder of ``lr``."""
    from pillm.core.runtime import resolve_device
    from pillm.lm.run import run_variant, score_test

    cfg = ScalingPointParams.from_dict(params, "scaling point")
    device = resolve_device(device)
    cuda = device.startswith("cuda")
    tokens_dir = str(Path(tokens[0]).parent)
    out = Path(lr).parent
    scratch = out / SEARCH_DIR
    first = cfg.seeds[0]
    done: dict[tuple[str, int], Path] = {}  # (variant, seed) -> folder that holds the run
    lr_of: dict[str, float] = {}
    record: dict[str, Any] = {"families": {}}

    for family, members in cfg.families.items():
        selector = members[0]
        tried: dict[float, dict[str, float]] = {}

        def pick(grid: list[float], family=family, selector=selector, tried=tried):
            for lr in grid:
                if lr not in tried:
                    say(f"{cfg.point}: {family} rate search, lr {lr:g} ({selector} seed {first})")
                    folder = scratch / family / f"lr{lr:g}"
                    run = with_lr(cfg.runs[selector], lr)
                    m = run_variant(
                        selector, first, run, tokens_dir, {}, str(folder), device,
                        test_split=False,
                    )  # fmt: skip
                    _finish_run(cuda)
                    tried[lr] = {"val_loss": float(m["val_loss"])}
            scores = {lr: _score(tried[lr]) for lr in grid}
            return None, min(grid, key=lambda lr: (scores[lr], lr)), scores

        _, chosen = search_grid(
            cfg.lrs, cfg.lr_extend, pick, "scaling.lrs", extend_key="scaling.lr_extend"
        )
        lr_of.update(dict.fromkeys(members, chosen.value))
        say(f"{cfg.point}: {family} rate {chosen.value:g} for {', '.join(members)}")
        kept = scratch / family / f"lr{chosen.value:g}"
        score_test(str(kept), with_lr(cfg.runs[selector], chosen.value), tokens_dir, device)
        for folder in (scratch / family).iterdir():
            (folder / "model.pt").unlink(missing_ok=True)
        _finish_run(cuda)
        done[(selector, first)] = kept
        record["families"][family] = pick_record(chosen, tried, members, first)

    for variant, run in cfg.runs.items():
        for seed in cfg.seeds:
            dest = out / variant / f"seed{seed}"
            if (variant, seed) in done:
                shutil.rmtree(dest, ignore_errors=True)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(done[(variant, seed)], dest)
                continue
            run_variant(
                variant, seed, with_lr(run, lr_of[variant]), tokens_dir, {}, str(dest), device,
                checkpoint=False,
            )  # fmt: skip
            _finish_run(cuda)
    shutil.rmtree(scratch, ignore_errors=True)
    folders = [out / v / f"seed{s}" for v in cfg.runs for s in cfg.seeds]
    where = {"point": cfg.point}
    gather(folders, "metrics.json", Path(runs), where)
    gather(folders, "curve.parquet", Path(curves), where)
    record["lr"] = lr_of
    write_json(lr, record)


def gather(folders: list[Path], name: str, path: Path, where: dict[str, str]) -> None:
    """One parquet of file ``name`` (metric records or a curve) over the run folders, with the
    point's columns (pyarrow: GPU hosts need no polars)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if name.endswith(".json"):
        tables = [pa.Table.from_pylist(json.loads((f / name).read_text())) for f in folders]
    else:
        tables = [pq.read_table(f / name) for f in folders]
    table = pa.concat_tables(tables, promote_options="permissive")
    for key, value in where.items():
        table = table.append_column(key, pa.array([value] * table.num_rows))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


# ---- the token splits of a point ---------------------------------------------------------------


def subset_tokens(tokens: list[str], params: dict[str, Any], out: list[str]) -> None:
    """A point's token splits: the first ``fraction`` of the train tokens (so the data axis's
    splits are nested), the validation and test splits whole or, with ``eval_tokens`` > 0, their
    first ``eval_tokens`` tokens (the smoke config's CPU budget). ``meta.json`` states the
    policy, the counts and the unigram floor of the shares: add-one unigram of the *whole*
    train split on these test tokens, so every point of a corpus shares one floor."""
    from pillm.data.corpus import unigram_loss

    cfg = ScalingTokensParams.from_dict(params, "scaling tokens")
    src, dest = Path(tokens[0]).parent, Path(out[0]).parent
    meta = json.loads((src / "meta.json").read_text())
    arrays = {s: np.load(src / f"{s}.npy") for s in ("train", "valid", "test")}
    full_train = arrays["train"]
    arrays["train"] = full_train[: int(round(cfg.fraction * len(full_train)))]
    if cfg.eval_tokens:
        for split in ("valid", "test"):
            arrays[split] = arrays[split][: cfg.eval_tokens]
    counts = {s: int(len(a)) for s, a in arrays.items()}
    scale = {s: counts[s] / meta["tokens"][s] for s in ("valid", "test")}
    policy = f"{meta['policy']}; train: first {round(100 * cfg.fraction)}% of its tokens"
    if cfg.eval_tokens:
        policy += f"; valid/test: first {cfg.eval_tokens} tokens"
    for split, ids in arrays.items():
        with atomic_path(dest / f"{split}.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, ids)
    write_json(
        dest / "meta.json",
        {
            **meta,
            "policy": policy,
            "tokens": counts,
            "full_tokens": meta["tokens"],
            "train_fraction": cfg.fraction,
            # bits per byte of capped splits: bytes in proportion to the tokens kept
            "bytes": {**meta["bytes"], **{s: meta["bytes"][s] * scale[s] for s in scale}},
            "unigram_test_loss": unigram_loss(full_train, arrays["test"], meta["vocab_size"]),
        },
    )
