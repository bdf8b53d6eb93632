"""PIL-LoRA vs LoRA on SST-2: data, closed-form heads, LoRA, determinism, job and report."""

import json
import re
import shutil
import time
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from transformers import BertConfig, BertModel

from pillm.core.config import ConfigError
from pillm.core.ridge import GramStats, solve_relative, solve_ridge
from pillm.data.files import DataError
from pillm.data.sst2 import Split, load_sst2, split_train
from pillm.lora.adapter import Adapter, gradient_stats
from pillm.lora.base import BaseModel, pad_batch, split_name
from pillm.lora.config import LoraConfig
from pillm.lora.figures import lora_figure
from pillm.lora.methods import (
    METHODS,
    ClosedFormHead,
    EarlyStop,
    FitResult,
    bucketed_epoch,
    centred_one_hot,
    chance_loss,
    choose_lr,
    fit_closed_form,
    fit_lora,
    majority_rate,
    patience_from,
)
from pillm.lora.plan import lora_model_names
from pillm.lora.report import LoraReport, aggregate_lora, fmt_p, fmt_sci, render_lora_tables
from pillm.lora.run import max_abs_diff, run_fits, weights_digest
from pillm.models.gpt import GPT, GPTConfig
from pillm.paper.claim_frame import read_claim_frame
from pillm.plan import validate as validate_config

from ..conftest import REPO

LORA_CFG = dict(
    n_train=64, n_dev=32, max_len=8, batch_size=16, pil_rank=64,
    lambdas=[1e-6, 1e-4, 1e-2, 1.0], kappa_max=1e10, lora_rank=4, lora_alpha=8,
    lora_dropout=0.0, lrs=[1e-3, 1e-2], lr_extend=0, max_steps=12, eval_every=4, patience=2,
    train_batch_size=8, weight_decay=0.0, adapter_etas=[0.3, 1.0], trained_alpha=1e-3,
)  # fmt: skip
LORA = LoraConfig.from_dict({**LORA_CFG, "methods": ["pil_lora", "ridge", "lora"]}, "lora")


# ---------------------------------------------------------------- toy base models


class Lookup(nn.Module):
    """'hidden states' = a fixed embedding of each token: pooled = mean of the rows."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(table, freeze=True)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids)


def _toy_linear(n: int = 600, d: int = 12, seed: int = 0):
    """Sentence i is the single token i + 1 whose state is x_i; label = [x_i · w > 0] with
    Σw = 0, so the rule survives the row standardisation (x̂·w = x·w / std(x))."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    w = torch.randn(d, generator=gen)
    w -= w.mean()
    labels = (x @ w > 0).long().numpy()
    table = torch.cat([torch.zeros(1, d), x])
    base = BaseModel(
        "toy", "toy", "causal", Lookup(table), lambda s, L: [[int(t)] for t in s], 0, d
    )
    ids = [[i + 1] for i in range(n)]
    return base, ids, labels


def _gpt_base(vocab: int = 40, dropout: float = 0.0) -> BaseModel:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab, context=16, n_layer=2, d_model=16, n_head=2, dropout=dropout)
    model = GPT(cfg).eval()
    return BaseModel(
        "pillm-s0", "pillm baseline", "causal", model,
        lambda sents, L: [[1 + (ord(c) % (vocab - 1)) for c in s][:L] for s in sents], 0, 16, 0,
    )  # fmt: skip


def _bert_base(vocab: int = 40) -> BaseModel:
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32,
    )  # fmt: skip
    return BaseModel(
        "minilm", "tiny bert", "encoder", BertModel(cfg).eval(),
        lambda sents, L: [[1 + (ord(c) % (vocab - 1)) for c in s][:L] for s in sents], 0, 16,
    )  # fmt: skip


def _sentences(n: int, seed: int) -> Split:
    """'good'/'bad' sentences padded with random filler words: a learnable rule."""
    rng = np.random.default_rng(seed)
    words = ["the", "film", "was", "a", "plot", "and"]
    labels = rng.integers(0, 2, n)
    sents = [
        " ".join([*rng.choice(words, rng.integers(1, 4)), "good" if y else "bad"]) for y in labels
    ]
    return Split(sents, labels.astype(np.int64))


# ---------------------------------------------------------------- data


def test_local_sst2_is_glue_train_and_validation(shared_data):
    splits, meta = load_sst2("local", str(shared_data))
    assert len(splits["train"]) == 67_349 and len(splits["validation"]) == 872
    assert meta["policy"].startswith("local:sst2")
    assert set(meta["sha256"]) == {"sst2/train.tsv", "sst2/dev.tsv", "sst2/test.tsv"}
    first = splits["validation"]
    assert first.sentences[0] == "it 's a charming and often affecting journey ."
    assert first.labels[0] == 1 and first.labels[1] == 0


def test_tampered_sst2_fails_its_checksum(shared_data, tmp_path):
    (tmp_path / "sst2").mkdir()
    shutil.copy(shared_data / "SHA256SUMS", tmp_path)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        shutil.copy(shared_data / "sst2" / name, tmp_path / "sst2")
    with open(tmp_path / "sst2" / "test.tsv", "a") as fh:
        fh.write("a tampered sentence\t1\n")
    with pytest.raises(DataError, match=r"checksum mismatch for .*sst2/test\.tsv"):
        load_sst2("local", str(tmp_path))


def test_offline_hub_fails_fast_pointing_at_local_dir(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets  # imported first: the clock times the refusal, not the import
    import huggingface_hub

    # both libraries read the variable when first imported, maybe before this test
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)

    t0 = time.perf_counter()
    with pytest.raises(DataError, match="data.local_dir"):
        load_sst2("hub", "unused")
    assert time.perf_counter() - t0 < 10


def test_split_train_is_seeded_and_disjoint():
    train = Split([f"s{i}" for i in range(100)], np.arange(100) % 2)
    fit, sel = split_train(train, 30, 20, seed=3)
    again, _ = split_train(train, 30, 20, seed=3)
    other, _ = split_train(train, 30, 20, seed=4)
    assert len(fit) == 30 and len(sel) == 20 and not set(fit.sentences) & set(sel.sentences)
    assert fit.sentences == again.sentences and fit.sentences != other.sentences
    assert len(split_train(train, 0, 20, seed=3)[0]) == 80  # 0: every row not in the dev split
    with pytest.raises(ValueError, match="lora.n_train"):
        split_train(train, 90, 20, seed=3)


def test_config_error_names_the_lora_key():
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    cfg["lora"]["methods"] = ["pil_lora", "adapter"]
    cfg["lora"]["pil_rank"] = 0
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, REPO / "config/schema.yaml")
    assert "lora.methods.1" in str(err.value) and "lora.pil_rank" in str(err.value)


def test_the_retired_trained_margin_key_is_refused_naming_its_replacement():
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    validate_config(cfg, REPO / "config/schema.yaml")
    cfg["lora"]["trained_margin"] = 0.05
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, REPO / "config/schema.yaml")
    msg = str(err.value)
    assert msg.startswith("lora.trained_margin: ") and "binomial test" in msg
    assert "Delete lora.trained_margin and set lora.trained_alpha" in msg
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) lora\.trained_margin"):
        LoraConfig.from_dict({**LORA_CFG, "methods": ["lora"], "trained_margin": 0.05}, "lora")


# ---------------------------------------------------------------- closed-form heads


@pytest.mark.parametrize("rank", [0, 256])
def test_closed_form_head_recovers_a_linearly_separable_rule(rank):
    base, ids, labels = _toy_linear(n=2400)
    fit = (ids[:1800], labels[:1800])
    sel = (ids[1800:2000], labels[1800:2000])
    res = fit_closed_form(base, fit, sel, rank, [1e-8, 1e-6, 1e-4, 1e-2], 1e10, 0, 256, "cpu")
    acc = float((res.predict(ids[2000:]) == labels[2000:]).mean())
    assert acc >= (0.95 if rank == 0 else 0.9)  # least squares, not max-margin
    assert res.weights["w_pil"].shape == ((rank or 12) + 1, 2)
    assert res.metrics["fixed_params"] == 12 * rank


def test_streamed_solve_equals_the_in_memory_ridge_solution():
    base, ids, labels = _toy_linear(n=300)
    res = fit_closed_form(base, (ids[:200], labels[:200]), (ids[200:], labels[200:]), 32,
                          [1e-3], 1e10, 7, 16, "cpu")  # fmt: skip
    head = ClosedFormHead(12, 32, 7, "cpu")
    x = base.model.emb.weight[1:201]
    h = head.features(x).double()
    y = centred_one_hot(torch.from_numpy(labels[:200]))
    lam = 1e-3 * torch.trace(h.T @ h).item() / h.shape[1]
    direct = torch.linalg.solve(h.T @ h + lam * torch.eye(h.shape[1], dtype=h.dtype), h.T @ y)
    torch.testing.assert_close(res.weights["w_pil"], direct, rtol=1e-8, atol=1e-10)
    assert res.metrics["lambda_rel"] == pytest.approx(1e-3)
    stats = GramStats.zeros(h.shape[1], 2)
    stats.update(h, y)
    torch.testing.assert_close(solve_ridge(stats, lam=lam).weight, direct)


def test_centred_one_hot_rows_sum_to_zero():
    y = centred_one_hot(torch.tensor([0, 1, 1]))
    assert y.tolist() == [[0.5, -0.5], [-0.5, 0.5], [-0.5, 0.5]]


# ---------------------------------------------------------------- determinism


def test_digest_detects_identical_and_one_ulp_apart():
    a = {"w": torch.randn(5, 3, dtype=torch.float64), "b": torch.zeros(3)}
    same = {k: v.clone() for k, v in a.items()}
    bumped = {**same, "w": same["w"].clone()}
    bumped["w"][2, 1] = torch.nextafter(
        bumped["w"][2, 1], torch.tensor(np.inf, dtype=torch.float64)
    )
    assert weights_digest(a) == weights_digest(same) and max_abs_diff(a, same) == 0.0
    assert weights_digest(a) != weights_digest(bumped)
    assert 0 < max_abs_diff(a, bumped) < 1e-15
    assert max_abs_diff(a, {"w": a["w"]}) == float("inf")


# ---------------------------------------------------------------- LoRA


def test_bucketed_epoch_visits_every_sentence_once_with_little_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, 1000).tolist()
    batches = bucketed_epoch(lengths, 16, np.random.default_rng(1), pool=10)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000)) and max(len(b) for b in batches) == 16
    again = bucketed_epoch(lengths, 16, np.random.default_rng(1), pool=10)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    shuffled = np.random.default_rng(1).permutation(1000)
    naive = sum(16 * max(lengths[i] for i in shuffled[k : k + 16]) for k in range(0, 1000, 16))
    assert padded < 0.7 * naive


@pytest.mark.parametrize("build", [_gpt_base, _bert_base])
def test_lora_trains_only_adapters_and_head(build):
    base = build()
    before = {k: v.clone() for k, v in base.model.state_dict().items()}
    data = _sentences(96, 0)
    ids = base.tokenize(data.sentences, 8)
    cfg = replace(LORA, patience=99, lora_modules="attention")  # no early stop: every evaluation
    res = fit_lora(base, (ids[:64], data.labels[:64]), (ids[64:], data.labels[64:]), cfg, 1e-2,
                   0, "cpu")  # fmt: skip
    assert all("lora_" in k or k.startswith("head.") for k in res.weights)
    assert any("lora_A" in k for k in res.weights) and any("lora_B" in k for k in res.weights)
    assert any(float(v.abs().max()) > 0 for k, v in res.weights.items() if "lora_B" in k)
    after = base.model.state_dict()  # the frozen base is never touched (the fit adapts a copy)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert [c["step"] for c in res.curve] == [4, 8, 12] and res.metrics["steps_run"] == 12
    assert res.curve[0]["fit_seconds"] < res.curve[-1]["fit_seconds"] == res.metrics["run_seconds"]
    best = next(c for c in res.curve if c["step"] == res.metrics["best_step"])
    assert res.fit_seconds == best["fit_seconds"]  # the time to train the kept weights
    targets = ("qkv",) if base.kind == "causal" else ("query", "value")
    assert {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in res.weights if "lora_" in k} == set(
        targets
    )


@pytest.mark.parametrize("method", ["pil_lora", "ridge", "lora"])
def test_reruns_with_one_seed_are_bit_identical(method):
    base = _gpt_base(dropout=0.1)  # dropout draws random numbers: the seed must cover them
    data = _sentences(96, 1)
    job = run_fits(
        base, method, data.take(np.arange(64)), data.take(np.arange(64, 96)),
        _sentences(40, 2), LORA, 0, "cpu",
    )  # fmt: skip
    assert weights_digest(job.first.weights) == weights_digest(job.timed.weights)
    assert 0 <= job.accuracy <= 1 and job.peak_mb > 0 and job.curve
    if method == "lora":  # the rerun of the chosen rate up to its best step: its weights
        assert job.metrics["lr"] in LORA.lrs and job.metrics["n_lrs"] == 2
        assert {c["lr"] for c in job.curve} == set(LORA.lrs)
        assert job.timed.metrics["steps_run"] == job.metrics["best_step"]
        assert job.timed.curve == []  # the rerun evaluates nothing
        assert job.metrics["tune_seconds"] >= job.first.fit_seconds > 0  # every rate's run
        chosen = [c for c in job.curve if c["chosen"] == 1.0]
        assert max(c["dev_accuracy"] for c in chosen) == job.dev_accuracy
    else:
        assert job.curve[0]["dev_accuracy"] == job.dev_accuracy


def test_early_stop_waits_patience_evaluations_after_the_best():
    stop = EarlyStop(patience=2)
    marks = [stop.update(s, a) for s, a in [(1, 0.5), (2, 0.6), (3, 0.6), (4, 0.55)]]
    assert marks == [True, True, False, False] and stop.done
    assert stop.best == 0.6 and stop.best_step == 2  # an equal score is no improvement


def test_patience_counts_only_after_the_warm_up_and_the_minimum_budget():
    stop = EarlyStop(patience=2, start=20)
    # the best comes early; evaluations up to step 20 never count, so the stop waits for two
    # evaluations after it
    for step, score in [(5, 0.7), (10, 0.6), (15, 0.6), (20, 0.6), (25, 0.6)]:
        stop.update(step, score)
        assert not stop.done
    stop.update(30, 0.65)
    assert stop.done and stop.best_step == 5
    assert patience_from(replace(LORA, max_steps=1500, min_steps=600)) == 600
    assert patience_from(replace(LORA, max_steps=1500, min_steps=0)) == 150  # the warm-up


def test_lora_stops_early_and_ends_on_the_best_evaluation():
    base = _gpt_base()
    data = _sentences(96, 3)
    ids = base.tokenize(data.sentences, 8)
    dev = (ids[64:], data.labels[64:])
    cfg = replace(LORA, max_steps=400, eval_every=2, patience=2, min_steps=60)
    res = fit_lora(base, (ids[:64], data.labels[:64]), dev, cfg, 3e-2, 0, "cpu")
    steps = [c["step"] for c in res.curve]
    best = res.metrics["best_step"]
    stop = max(best, cfg.min_steps) + 2 * cfg.eval_every  # patience after the minimum budget
    assert res.metrics["steps_run"] == steps[-1] == stop < 400
    assert res.metrics["patience_from"] == 60
    assert res.metrics["train_loss_first"] == res.curve[0]["train_loss"]
    assert res.metrics["train_loss_last"] == res.curve[-1]["train_loss"]
    assert float((res.predict(dev[0]) == dev[1]).mean()) == res.metrics["best_dev_accuracy"]
    assert max(c["dev_accuracy"] for c in res.curve) == res.metrics["best_dev_accuracy"]


def test_chance_loss_is_the_entropy_of_the_fit_labels():
    assert chance_loss(np.array([0, 1, 1, 0])) == pytest.approx(np.log(2))
    assert chance_loss(np.array([1, 1, 1, 0])) == pytest.approx(
        -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    )
    assert chance_loss(np.array([1, 1])) == 0.0
    assert majority_rate(np.array([0, 1, 1, 0])) == 0.5
    assert majority_rate(np.array([1, 1, 1, 0])) == 0.75 and majority_rate(np.array([0])) == 1.0


def test_lora_record_says_whether_it_trained():
    """A learnable rule: the kept weights' own loss on the fit sentences (eval mode) falls
    below chance and their accuracy there beats the majority class (trained); a learning rate
    too small to move the head leaves it at chance (not trained). The record holds the rule's
    inputs, each recomputed here from the kept weights."""
    from scipy.stats import binomtest

    base = _gpt_base()
    data = _sentences(160, 11)
    fit, dev = data.take(np.arange(128)), data.take(np.arange(128, 160))
    cfg = replace(LORA, max_steps=80, eval_every=8, patience=99, lrs=[3e-2], lr_extend=0,
                  lora_modules="attention")  # fmt: skip
    job = run_fits(base, "lora", fit, dev, _sentences(40, 12), cfg, 0, "cpu")
    m = job.metrics
    assert m["chance_loss"] == pytest.approx(chance_loss(fit.labels))
    assert m["majority_rate"] == majority_rate(fit.labels) and m["trained_alpha"] == 1e-3
    logits = job.timed.scores(base.tokenize(fit.sentences, cfg.max_len))
    kept = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(fit.labels))
    assert m["train_loss_kept"] == pytest.approx(float(kept), rel=1e-12)
    n_correct = int((logits.argmax(1) == fit.labels).sum())
    assert m["train_accuracy"] == n_correct / len(fit) > m["majority_rate"]
    p = binomtest(n_correct, len(fit), m["majority_rate"], alternative="greater").pvalue
    assert m["trained_p"] == pytest.approx(p, rel=1e-12) and p < m["trained_alpha"]
    assert m["train_loss_kept"] < m["chance_loss"] and m["trained"] == 1.0
    assert m["train_loss_first"] > m["train_loss_last"] and "trained_margin" not in m
    frozen = run_fits(base, "lora", fit, dev, _sentences(40, 12), replace(cfg, lrs=[1e-7]), 0,
                      "cpu")  # fmt: skip
    fm = frozen.metrics  # the zero-initialised head barely moved: its loss stays at ln 2
    assert fm["trained"] == 0.0 and fm["train_loss_kept"] > fm["chance_loss"]


def test_lr_is_chosen_on_dev_and_validation_labels_change_no_choice():
    assert choose_lr([_scored(0.6), _scored(0.7), _scored(0.7)]) == 1  # first of equals
    base = _gpt_base()
    data, val = _sentences(96, 4), _sentences(40, 5)
    flipped = Split(val.sentences, 1 - val.labels)
    fit, dev = data.take(np.arange(64)), data.take(np.arange(64, 96))
    a = run_fits(base, "lora", fit, dev, val, LORA, 0, "cpu")
    b = run_fits(base, "lora", fit, dev, flipped, LORA, 0, "cpu")
    assert a.metrics["lr"] == b.metrics["lr"] and a.metrics["best_step"] == b.metrics["best_step"]
    assert weights_digest(a.timed.weights) == weights_digest(b.timed.weights)
    assert a.accuracy + b.accuracy == pytest.approx(1.0)


def test_an_edge_pick_extends_the_rate_grid(monkeypatch):
    """Dev accuracy rising with the rate: the top pick adds 1e-2 x 10 (the grid's ratio), which
    wins and stays on the edge once ``lr_extend`` = 1 is spent; the rerun uses the winner."""
    calls = []

    def fake_fit(base, fit, dev, cfg, lr, seed, device, stop_at=None, target=None):
        calls.append((lr, stop_at))
        acc = min(0.9, 0.5 + 4 * lr)
        curve = [{"step": 5, "fit_seconds": 1.0, "dev_accuracy": acc, "train_loss": 0.6}]
        metrics = {"lr": lr, "best_step": 5.0, "steps_run": 5.0, "warmup_steps": 1.0,
                   "best_dev_accuracy": acc, "run_seconds": 1.0, "patience_from": 1.0,
                   "train_loss_first": 0.7, "train_loss_last": 0.6}  # fmt: skip
        return FitResult({"w": torch.zeros(1)}, lambda ids: np.zeros(len(ids), np.int64), 1.0,
                         metrics, [] if stop_at else curve,
                         lambda ids: np.zeros((len(ids), 2)))  # fmt: skip

    monkeypatch.setattr("pillm.lora.run.fit_lora", fake_fit)
    data = _sentences(60, 9)
    job = run_fits(_gpt_base(), "lora", data.take(np.arange(40)), data.take(np.arange(40, 60)),
                   data.take(np.arange(10)), replace(LORA, lr_extend=1), 0, "cpu")  # fmt: skip
    assert [lr for lr, stop in calls if stop is None] == [1e-3, 1e-2, 0.1]
    assert calls[-1] == (0.1, 5) and job.metrics["lr"] == 0.1
    assert job.metrics["lr_at_grid_edge"] == 1.0 and job.metrics["lr_extensions"] == 1.0
    assert job.metrics["lr_on_edge"] == 1.0 and job.metrics["n_lrs"] == 3.0
    assert {c["lr"] for c in job.curve if c["chosen"] == 1.0} == {0.1}


def _scored(dev_acc: float) -> FitResult:
    return FitResult({}, lambda ids: np.zeros(0), 0.0, {"best_dev_accuracy": dev_acc})


def test_job_names_carry_the_seed_and_pillm_seeds_must_be_lm_seeds():
    cfg = {"lora": {"models": ["pillm", "minilm"], "seeds": [0, 2]}, "lm": {"seeds": [0, 1, 2]}}
    assert lora_model_names(cfg) == ["pillm-s0", "pillm-s2", "minilm-s0", "minilm-s2"]
    assert split_name("minilm-s2") == ("minilm", 2) and split_name("pillm-s10") == ("pillm", 10)
    cfg["lm"]["seeds"] = [0, 1]
    with pytest.raises(ConfigError, match=r"lora.seeds \[2\] are not in lm.seeds"):
        lora_model_names(cfg)
    cfg["lora"]["models"] = ["minilm"]  # MiniLM's seeds are the study's own
    assert lora_model_names(cfg) == ["minilm-s0", "minilm-s2"]


class _Input(dict):
    """A rule's input as Snakemake hands it to a params function: files by name, ``keys()``."""

    __getattr__ = dict.__getitem__


def test_job_args_are_the_lora_command_line_of_one_job():
    import shlex
    from types import SimpleNamespace

    from pillm.lora import plan

    cfg = {"lora": {"models": ["pillm"], "seeds": [0], "methods": ["ridge"], "n_dev": 8},
           "data": {"corpus": "wikitext2"}, "lm": {"seeds": [0]}}  # fmt: skip
    w, out = SimpleNamespace(model="pillm-s0", method="ridge"), _Input(metrics="r/lora/a/b/m.json")
    own = _Input(checkpoint="r/lm/model.pt", tokenizer="r/tok.json")
    args = shlex.split(plan.job_args(cfg, w, own, out))
    params = {"lora": {"methods": ["ridge"], "n_dev": 8}, "data": {"corpus": "wikitext2"}}
    assert args == ["--model", "pillm-s0", "--method", "ridge", "--params",
                    json.dumps(params, sort_keys=True), "--checkpoint", "r/lm/model.pt",
                    "--tokenizer", "r/tok.json", "--out-dir", "r/lora/a/b"]  # fmt: skip
    assert "--checkpoint" not in plan.job_args(cfg, w, _Input(), out)  # a pretrained model
    assert plan.job_names(cfg) == ["pillm-s0/ridge"]
    assert plan.METHODS == METHODS  # the rule's constraint, without importing torch


# ---------------------------------------------------------------- report


def _records(model, method, acc, fit_s, dev_acc, identical=1.0, **extra):
    group, seed = split_name(model)
    ident = {"experiment": "lora", "variant": method, "seed": seed, "corpus": "sst2",
             "tokenizer": "t", "data_policy": "p"}  # fmt: skip
    ctx = {"model": model, "model_group": group, "model_label": "L", "method": method,
           "device": "cpu", "device_name": "CPU", "weights_sha256": "x", "git_rev": "r"}  # fmt: skip
    metrics = {"accuracy": acc, "dev_accuracy": dev_acc, "fit_seconds": fit_s,
               "tune_seconds": extra.pop("tune", fit_s), "identical_rerun": identical,
               "max_abs_diff": 0.0, "trainable_params": 10, "peak_memory_mb": 1.0,
               "n_eval": 872, "n_train": 512, **extra}  # fmt: skip
    return [{**ident, "metric": k, "value": v, **ctx} for k, v in metrics.items()]


def _write_job(root, model, method, acc, fit_s, dev_acc, **extra):
    d = root / model / method
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps(_records(model, method, acc, fit_s, dev_acc,
                                                        **extra)))  # fmt: skip
    if method == "lora":  # two rates; the chosen one (1e-3) reaches 0.62 dev accuracy at 2.5 s
        curve = [{"step": 5, "fit_seconds": 1.0, "dev_accuracy": 0.55, "lr": 1e-3, "chosen": 1.0},
                 {"step": 10, "fit_seconds": 2.5, "dev_accuracy": 0.62, "lr": 1e-3, "chosen": 1.0},
                 {"step": 5, "fit_seconds": 0.9, "dev_accuracy": 0.70, "lr": 1e-2, "chosen": 0.0}]  # fmt: skip
    else:
        curve = [{"step": 0, "fit_seconds": fit_s, "dev_accuracy": dev_acc}]
    pl.DataFrame(curve).with_columns(
        model=pl.lit(model), method=pl.lit(method), model_group=pl.lit(split_name(model)[0])
    ).write_parquet(d / "curve.parquet")
    return d


def test_aggregate_report_and_claim_frame_keep_missing_jobs_visible(tmp_path):
    lora_extra = {"lr": 1e-3, "lr_at_grid_edge": 0.0, "stopped_early": 1.0, "best_step": 10.0,
                  "train_loss_at_best": 0.5, "tune": 9.0, "trained": 1.0, "chance_loss": 0.69,
                  "patience_from": 600.0, "train_loss_kept": 0.644, "train_accuracy": 0.642,
                  "majority_rate": 0.5637, "trained_p": 1.1e-24}  # fmt: skip
    paths = [
        _write_job(tmp_path, "pillm-s0", "pil_lora", 0.8, 0.5, 0.60),
        _write_job(tmp_path, "pillm-s0", "lora", 0.82, 2.5, 0.62, **lora_extra),
        _write_job(tmp_path, "pillm-s1", "pil_lora", 0.7, 0.5, 0.61),
    ]
    jobs = [f"{m}/{k}" for m in ("pillm-s0", "pillm-s1") for k in ("pil_lora", "lora")]
    aggregate_lora([str(p / "metrics.json") for p in paths],
                   [str(p / "curve.parquet") for p in paths], jobs, str(tmp_path))  # fmt: skip
    summary = pl.read_parquet(tmp_path / "lora.parquet")
    assert summary.height == 4
    missing = summary.filter((pl.col("model") == "pillm-s1") & (pl.col("method") == "lora"))
    assert missing["accuracy"][0] is None and missing["model_group"][0] == "pillm"
    assert missing["seed"][0] == 1  # from the name: the job is still a seed of its group
    frame = read_claim_frame(tmp_path / "claims/lora.parquet")
    acc = frame.filter(pl.col("metric") == "accuracy").sort("a", "seed")
    assert acc.select("a", "seed").rows() == [("pillm_lora", 0), ("pillm_pil_lora", 0),
                                              ("pillm_pil_lora", 1)]  # fmt: skip
    assert acc["value"].to_list() == pytest.approx([82.0, 80.0, 70.0])
    flags = frame.filter(pl.col("metric") == "trained")  # the opponent's training record
    assert flags.select("a", "seed", "value").rows() == [("pillm_lora", 0, 1.0)]
    params = {"name": "t", "seeds": [0, 1], "models": ["pillm", "minilm"], **LORA_CFG,
              "trained_alpha": 0.01}  # fmt: skip
    rep = LoraReport(summary, pl.read_parquet(tmp_path / "lora_curves.parquet"), params)
    # LoRA's chosen run passes the head's 0.60 dev accuracy at its 2.5 s evaluation (the faint
    # 1e-2 run's 0.70 at 0.9 s does not count); s1 has no LoRA run: not counted
    assert rep.time_to("pillm", "pil_lora") == (2.5, 1, 1)
    macros = rep.numbers()
    assert macros["LoraPillmPilLoraAcc"] == "75.0 \\ensuremath{\\pm} 7.1"
    assert macros["LoraPillmPilLoraDevAcc"] == "60.5 \\ensuremath{\\pm} 0.7"
    assert macros["LoraPillmLoraAcc"] == "82.0"
    assert macros["LoraPillmFitRatio"] == "5.0$\\times$"
    assert macros["LoraPillmTuneRatio"] == "18.0$\\times$"
    assert macros["LoraPillmTimeToPilLoraRatio"] == "5.0$\\times$"
    assert macros["LoraPillmTimeToPilLora"] == "2.50\\,s"
    assert macros["LoraPillmReachRidge"] == "--"  # no ridge jobs
    assert macros["LoraPillmPilLoraIdentical"] == "2/2"
    assert macros["LoraPillmLrChosen"] == "$10^{-3}$ (1/1)" and macros["LoraPillmLrEdge"] == "0/1"
    assert macros["LoraLrGrid"] == "$10^{-3}$, $10^{-2}$" and macros["LoraNSeeds"] == "2"
    assert macros["LoraNModels"] == "2"  # the section's count of base models: lora.models
    assert macros["LoraMiniLMLoraAcc"] == "--"  # every macro defined, absent groups too
    assert macros["LoraNJobs"] == "3" and macros["LoraNExpected"] == "4"
    assert macros["LoraPillmTrained"] == "1/1" and macros["LoraPillmChanceLoss"] == "0.690"
    assert macros["LoraPatienceFrom"] == "600" and macros["LoraMiniLMTrained"] == "--"
    assert macros["LoraTrainedAlpha"] == "$10^{-2}$" and macros["LoraPillmTrainLossKept"] == "0.644"
    assert macros["LoraPillmTrainAcc"] == "64.2" and macros["LoraPillmMajorityRate"] == "56.4"
    assert macros["LoraPillmTrainedPMax"] == "$<10^{-10}$"  # the largest p over seeds
    assert macros["LoraMiniLMTrainedPMax"] == "--"
    render_lora_tables(str(tmp_path), params, str(REPO / "paper/templates"), str(tmp_path / "t.tex"),
                       str(tmp_path / "n.tex"))  # fmt: skip
    table = (tmp_path / "t.tex").read_text()
    assert (
        "75.0 \\ensuremath{\\pm} 7.1 & 60.5 \\ensuremath{\\pm} 0.7 & 0.50" in table
        and "\\label{tab:lora}" in table
    )
    assert "Random-feature head (PIL, closed form)" in table and "PIL-LoRA" not in table
    assert "\\newcommand{\\LoraPillmLoraFit}{2.50}" in (tmp_path / "n.tex").read_text()
    lora_figure(str(tmp_path), str(tmp_path / "f.pdf"), str(tmp_path / "f.png"))
    assert (tmp_path / "f.pdf").stat().st_size > 0 and (tmp_path / "f.png").stat().st_size > 0


def test_learning_rates_print_as_powers_of_ten():
    assert fmt_sci(3e-4) == "$3{\\times}10^{-4}$" and fmt_sci(1e-3) == "$10^{-3}$"


def test_p_values_print_fixed_scientific_or_as_a_bound():
    assert fmt_p(0.5) == "0.50" and fmt_p(3.2e-4) == "$3.2{\\times}10^{-4}$"
    assert fmt_p(1e-10) == "$1.0{\\times}10^{-10}$" and fmt_p(0.0) == "$<10^{-10}$"


def test_claims_file_names_arms_the_frame_writes():
    spec = yaml.safe_load((REPO / "paper/claims/lora.yaml").read_text())
    methods = ("pil_lora", "ridge", "pil_adapter", "lora")
    arms = {f"{g}_{m}" for g in ("pillm", "minilm") for m in methods}
    assert {a for c in spec["claims"] for a in c["arms"]} == arms == set(spec["names"])
    assert all(c["id"].startswith("lora_") and c["metric"] in spec["metrics"]
               for c in spec["claims"])  # fmt: skip


def test_section_uses_defined_macros_and_types_no_direction():
    from pillm.paper.latex import macro_name

    from ..paper.test_claims import typed_directions

    text = (REPO / "paper/sections/lora.tex").read_text()
    assert typed_directions(text) == []  # every direction comes from a \Claim macro
    summary = pl.DataFrame({"model": ["minilm-s0"], "method": ["lora"], "model_group": ["minilm"],
                            "model_label": ["L"], "device_name": ["CPU"], "accuracy": [0.5],
                            "identical_rerun": [1.0]})  # fmt: skip
    params = {"name": "t", "seeds": [0], "models": ["minilm"], **LORA_CFG}
    defined = set(LoraReport(summary, pl.DataFrame({"model": []}), params).numbers())
    used = set(re.findall(r"\\(Lora[A-Za-z]+)", text))
    assert used and used <= defined, f"undefined: {sorted(used - defined)}"
    spec = yaml.safe_load((REPO / "paper/claims/lora.yaml").read_text())
    declared = {macro_name(c["id"], prefix="Claim") for c in spec["claims"]}
    claims = set(re.findall(r"\\(Claim[A-Za-z]+)", text))
    assert claims == declared  # each declared claim is stated, none undeclared


# ---------------------------------------------------------------- in-layer PIL adapter


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("build", [_gpt_base, _bert_base])
def test_adapter_target_is_a_descent_direction_of_the_task_loss(build):
    """A small step along the solved update lowers the readout's loss, the opposite step raises
    it (the ridge solution of the features on -∂L/∂f has a positive inner product with -∂L/∂f)."""
    base = build()
    data = _sentences(120, 6)
    ids = base.tokenize(data.sentences, 8)
    fit = (ids, data.labels)
    readout = fit_closed_form(base, fit, fit, 0, [1e-2], 1e10, 0, 16, "cpu")
    head = ClosedFormHead(base.d_model, 0, 0, "cpu")
    head.weight = readout.weights["w_pil"]
    adapter = Adapter(base, 32, 0, "cpu")
    stats, _ = gradient_stats(base, adapter, head, *fit, 16, "cpu")
    assert stats.n == sum(len(s) for s in ids)  # one row per real token
    adapter.weight, _ = solve_relative(stats, stats, [1e-3], 1e10)

    def loss(scale: float) -> float:
        adapter.scale = scale
        x, m = pad_batch(ids, base.pad_id, "cpu")
        with adapter.installed(), torch.no_grad():
            s = head.scores(base.pooled(x, m))
        return float(0.5 * ((s - centred_one_hot(torch.from_numpy(data.labels))) ** 2).sum())

    step = 1e-3 if base.kind == "causal" else 1e-1
    assert loss(step) < loss(0.0) < loss(-step)
    assert _hook_count(base.model) == 0  # every hook removed after use


def test_adapter_fit_changes_no_base_weight_and_chooses_eta_on_dev():
    base = _gpt_base(dropout=0.1)
    before = {k: v.clone() for k, v in base.model.state_dict().items()}
    data = _sentences(160, 7)
    job = run_fits(
        base, "pil_adapter", data.take(np.arange(120)), data.take(np.arange(120, 160)),
        _sentences(40, 8), replace(LORA, pil_rank=32), 0, "cpu",
    )  # fmt: skip
    assert weights_digest(job.first.weights) == weights_digest(job.timed.weights)
    assert set(job.timed.weights) == {"w_adapter", "w_head"}
    assert job.timed.weights["w_adapter"].shape == (33, 16)
    etas = job.timed.curve
    assert [c["eta"] for c in etas] == list(LORA.adapter_etas)
    assert job.timed.metrics["eta"] == max(etas, key=lambda c: c["dev_accuracy"])["eta"]
    assert job.dev_accuracy == job.timed.metrics["best_dev_accuracy"]
    after = base.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and _hook_count(base.model) == 0
