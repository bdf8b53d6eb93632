"""One train window of a SAFFU job: the type map and context features of every split, the
train unigram, and the warm start (the explicit solution at the smoothing mass chosen on the
held-out split) with its test scores."""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import Tensor

from pillm.core.runtime import sync
from pillm.core.selection import GridPick, check_extendable, search_grid
from pillm.models.evaluate import bits_per_byte, perplexity
from pillm.saffu.config import SaffuJobConfig, SaffuSetting
from pillm.saffu.grids import grid_metrics
from pillm.saffu.model import (
    SaffuLM,
    context_features,
    cooccurrence,
    evaluate,
    explicit_solution,
    heldout_loss,
    n_inputs,
    type_index,
    unigram,
)


def select_alpha(
    f: Tensor, prior: Tensor, job: SaffuJobConfig, model: SaffuLM, valid: tuple
) -> tuple[Tensor, GridPick, dict[float, float]]:
    """Smoothing mass of ``job.alphas`` (extended past an edge, ``alpha_extend`` points per side)
    with the lowest held-out loss; returns the explicit solution there and the selection."""
    scores: dict[float, float] = {}

    def pick(grid: list[float]) -> tuple[None, float, dict[float, float]]:
        for a in grid:
            if a not in scores:
                model.weight.data.copy_(explicit_solution(f, a, prior))
                scores[a] = heldout_loss(model, *valid, job.eval_chunk)
        best = min(grid, key=lambda a: scores[a])
        return None, best, {a: scores[a] for a in grid}

    check_extendable(job.alphas, job.alpha_extend, "saffu.alphas", "saffu.alpha_extend")
    _, chosen = search_grid(
        job.alphas, job.alpha_extend, pick, "saffu.alphas", extend_key="saffu.alpha_extend"
    )
    return explicit_solution(f, chosen.value, prior), chosen, scores


@dataclass
class Window:
    """One train window's inputs: type map, features of every split, the unigram, the warm
    start (explicit solution at the chosen alpha) and its selection."""

    offset: int
    length: int
    m: int
    n_in: int
    other_share: float
    data: dict[str, tuple[Tensor, Tensor, Tensor]]
    prior: Tensor
    warm: Tensor | None
    explicit: dict[str, float]  # the warm start's solve, selection and test metrics
    common: dict[str, float]  # every run's: the unigram model's test metrics


def prepare_window(
    arrays: dict[str, Tensor], offset: int, length: int, vocab: int, setting: SaffuSetting,
    job: SaffuJobConfig, model: SaffuLM | None, device: str, explicit: bool, test_bytes: int,
) -> tuple[Window, SaffuLM]:  # fmt: skip
    """The window of ``length`` train tokens at ``offset`` and the model it trains: ``model``
    itself when its input count fits the window's type map, a new one otherwise. With
    ``explicit``, the warm start and its scores are computed (``Window.explicit``)."""
    train = arrays["train"][offset : offset + length]
    index, m = type_index(train, vocab, job.top_types)
    n_in = n_inputs(setting.agg, m)
    if model is None or model.weight.shape[0] != n_in:
        model = SaffuLM(n_in, vocab).to(device)
    data = {}
    for split, toks in (("train", train), ("valid", arrays["valid"]), ("test", arrays["test"])):
        toks = toks.to(device)
        idx, wts = context_features(toks, index, m, setting.block, setting.radius, setting.agg)
        data[split] = (idx, wts, toks[1:])
    prior = unigram(data["train"][2], vocab)
    out: dict[str, float] = {}
    warm = None
    if explicit:
        sync(device)
        t0 = time.perf_counter()
        f = cooccurrence(*data["train"], n_in, vocab)
        sync(device)
        out["cooccurrence_time_s"] = time.perf_counter() - t0
        warm, alpha, scores = select_alpha(f, prior, job, model, data["valid"])
        del f
        sync(device)
        out["solve_time_s"] = time.perf_counter() - t0
        out.update(grid_metrics("alpha", alpha), alpha_val_loss=scores[alpha.value])
        model.weight.data.copy_(warm)  # the explicit solution as a model of its own
        out.update(score_test(model, data["test"], job.eval_chunk, test_bytes, prefix="init_"))
    # the cold start's model before its first step, without its noise: the train unigram
    unigram_loss = float(-prior.log()[data["test"][2]].mean())
    common = {"unigram_test_loss": unigram_loss, "unigram_test_ppl": perplexity(unigram_loss)}
    other = float((index[train] == m - 1).double().mean())
    return Window(offset, length, m, n_in, other, data, prior, warm, out, common), model


def score_test(
    model: SaffuLM, test: tuple, chunk: int, test_bytes: int, prefix: str = ""
) -> dict[str, float]:
    """Test loss, perplexity, accuracy and bits per byte of the model as it stands."""
    r = evaluate(model, *test, chunk)
    n_tok = int(test[2].shape[0]) + 1
    return {
        f"{prefix}test_loss": r["loss"],
        f"{prefix}test_ppl": perplexity(r["loss"]),
        f"{prefix}test_acc": r["acc"],
        f"{prefix}test_bpb": bits_per_byte(r["nll"], int(r["n"]), n_tok, test_bytes),
    }
