"""The n-gram baseline job of the SAFFU study: interpolated Kneser-Ney (pillm.saffu.kneser_ney)
on the same train windows as the SAFFU runs (every fraction x seed, pillm.saffu.data) and the
same predicted test tokens, the order chosen on the held-out split. CPU only."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from pillm.core.log import say
from pillm.core.records import cpu_name, git_revision, tidy_records, write_json
from pillm.core.selection import search_grid
from pillm.models.evaluate import bits_per_byte
from pillm.saffu.config import KneserNeyConfig
from pillm.saffu.data import train_window
from pillm.saffu.kneser_ney import KneserNey


def fit_window(
    train: list[int], valid: list[int], test: list[int], vocab: int, cfg: KneserNeyConfig
) -> dict[str, float]:
    """Fit every order on ``train``, pick the lowest held-out loss (the grid extended by one
    order past an edge pick, up to ``order_extend`` times per side, never below 1:
    ``pillm.core.selection.search_grid``), score the test tokens."""
    t0 = time.perf_counter()
    val: dict[int, float] = {}

    def pick(grid: list[float]) -> tuple[None, float, dict[float, float]]:
        for order in grid:
            if order not in val:
                say(f"kneser-ney: order {order:g}")
                nll, n = KneserNey(train, int(order), vocab, cfg.discount).nll(valid)
                val[order] = nll / n
        return None, min(grid, key=lambda k: (val[k], k)), {k: val[k] for k in grid}

    # one configured order is the user's choice: nothing to extend; order 1 has none below it
    extend = cfg.order_extend if len(cfg.orders) > 1 else 0
    _, chosen = search_grid(
        cfg.orders,
        extend,
        pick,
        "saffu.kn.orders",
        step=1,
        floor=1,
        extend_key="saffu.kn.order_extend",
    )
    best = int(chosen.value)
    model = KneserNey(train, best, vocab, cfg.discount)
    nll, n = model.nll(test)
    out = {
        "order": float(best), "val_loss": val[best], "test_loss": nll / n,
        "test_ppl": math.exp(nll / n), "test_nll": nll, "test_predicted": float(n),
        "order_edge_hit": float(chosen.edge_hit), "order_extensions": float(chosen.extensions),
        "order_on_edge": float(chosen.on_edge), "fit_time_s": time.perf_counter() - t0,
    }  # fmt: skip
    out.update({f"val_loss_order{int(k)}": v for k, v in val.items()})
    return out


def run_kneser_ney(params: dict[str, Any], tokens_dir: str | Path, out_dir: str | Path) -> None:
    """``params``: {kn: the saffu.kn section, fractions, seeds} (the saffu_kn rule).
    Writes ``metrics.json``: one run per fraction (1.0 always) x seed, variant ``kneser_ney``.
    No polars here: the job runs on GPU hosts too (pillm.saffu.report summarises it)."""
    import json

    cfg = KneserNeyConfig.from_dict(params["kn"], "saffu.kn")
    tokens_dir = Path(tokens_dir)
    meta = json.loads((tokens_dir / "meta.json").read_text())
    arrays = {
        s: np.load(tokens_dir / f"{s}.npy").astype(np.int64) for s in ("train", "valid", "test")
    }
    vocab, n_train = meta["vocab_size"], len(arrays["train"])
    valid, test = arrays["valid"].tolist(), arrays["test"].tolist()
    fractions = sorted({float(f) for f in params["fractions"]} | {1.0})
    cache: dict[tuple[int, int], dict[str, float]] = {}
    where = {"device": "cpu", "device_name": cpu_name(1), "git_rev": git_revision()}
    records: list[dict[str, Any]] = []
    for fraction in fractions:
        for seed in params["seeds"]:
            offset, length = train_window(n_train, fraction, seed)
            if (offset, length) not in cache:
                train = arrays["train"][offset : offset + length].tolist()
                say(f"kneser-ney: fraction {fraction:g}, seed {seed}: {length} train tokens")
                cache[(offset, length)] = fit_window(train, valid, test, vocab, cfg)
            out = dict(cache[(offset, length)])
            out.update(fraction=fraction, train_tokens=float(length), window_offset=float(offset))
            out["test_bpb"] = bits_per_byte(
                out["test_nll"], int(out["test_predicted"]), len(test), meta["bytes"]["test"]
            )
            identity = {
                "experiment": "saffu", "variant": "kneser_ney", "init": "kn", "fraction": fraction,
                "seed": seed, "corpus": meta["corpus"], "tokenizer": meta["tokenizer"],
                "data_policy": meta["policy"],
            }  # fmt: skip
            context = {"discount": str(cfg.discount), "vocab_size": vocab, **where}
            records += tidy_records(identity, out, context)
    write_json(Path(out_dir) / "metrics.json", records)
