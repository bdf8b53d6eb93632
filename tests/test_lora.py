"""PIL-LoRA vs LoRA on SST-2: data, closed-form heads, LoRA, determinism, job and report."""

import json
import shutil
import time

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from torch import nn
from transformers import BertConfig, BertModel

from pillm.core.ridge import GramStats, solve_ridge
from pillm.data.files import DataError
from pillm.data.sst2 import Split, load_sst2, split_train
from pillm.lora.base import BaseModel
from pillm.lora.figures import lora_figure
from pillm.lora.methods import (
    ClosedFormHead,
    bucketed_epoch,
    centred_one_hot,
    fit_closed_form,
    fit_lora,
)
from pillm.lora.report import LoraReport, aggregate_lora, render_lora_tables
from pillm.lora.run import max_abs_diff, run_fits, weights_digest
from pillm.models.gpt import GPT, GPTConfig
from pillm.plan import ConfigError, validate_config
from pillm.settings import LoraConfig

from .conftest import REPO

LORA_CFG = dict(
    seed=0, n_train=64, n_select=32, max_len=8, batch_size=16, pil_rank=64,
    lambdas=[1e-6, 1e-4, 1e-2, 1.0], kappa_max=1e10, lora_rank=4, lora_alpha=8,
    lora_dropout=0.0, steps=12, lr=1e-2, train_batch_size=8, weight_decay=0.0, eval_every=4,
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
    assert len(split_train(train, 0, 20, seed=3)[0]) == 80  # 0: every row not selecting λ
    with pytest.raises(ValueError, match="lora.n_train"):
        split_train(train, 90, 20, seed=3)


def test_config_error_names_the_lora_key():
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    cfg["lora"]["methods"] = ["pil_lora", "adapter"]
    cfg["lora"]["pil_rank"] = 0
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, REPO / "config/schema.yaml")
    assert "lora.methods.1" in str(err.value) and "lora.pil_rank" in str(err.value)


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
    data = _sentences(64, 0)
    ids = base.tokenize(data.sentences, 8)
    res = fit_lora(base, (ids, data.labels), LORA, 0, "cpu", lambda p: 0.5)
    assert all("lora_" in k or k.startswith("head.") for k in res.weights)
    assert any("lora_A" in k for k in res.weights) and any("lora_B" in k for k in res.weights)
    assert any(float(v.abs().max()) > 0 for k, v in res.weights.items() if "lora_B" in k)
    after = base.model.state_dict()  # the frozen base is never touched (the fit adapts a copy)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert [c["step"] for c in res.curve] == [4, 8, 12]
    assert res.curve[0]["fit_seconds"] < res.curve[-1]["fit_seconds"] == res.fit_seconds
    targets = ("qkv",) if base.kind == "causal" else ("query", "value")
    assert {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in res.weights if "lora_" in k} == set(
        targets
    )


@pytest.mark.parametrize("method", ["pil_lora", "ridge", "lora"])
def test_reruns_with_one_seed_are_bit_identical(method):
    base = _gpt_base(dropout=0.1)  # dropout draws random numbers: the seed must cover them
    data = _sentences(96, 1)
    fits, acc, peak, _ = run_fits(
        base, method, data.take(np.arange(64)), data.take(np.arange(64, 96)),
        _sentences(40, 2), LORA, "cpu",
    )  # fmt: skip
    assert weights_digest(fits[0].weights) == weights_digest(fits[1].weights)
    assert 0 <= acc <= 1 and peak > 0 and fits[1].curve and fits[1].curve[-1]["accuracy"] == acc
    if method == "lora":  # only the timed fit is scored: scoring must not change the weights
        assert fits[0].curve == [] and len(fits[1].curve) == 3


# ---------------------------------------------------------------- report


def _records(model, method, acc, fit_s, identical=1.0):
    ident = {"experiment": "lora", "variant": method, "seed": 0, "corpus": "sst2",
             "tokenizer": "t", "data_policy": "p"}  # fmt: skip
    ctx = {"model": model, "model_group": "pillm" if model.startswith("pillm") else model,
           "model_label": "L", "method": method, "device": "cpu", "device_name": "CPU",
           "weights_sha256": "x", "git_rev": "r"}  # fmt: skip
    metrics = {"accuracy": acc, "fit_seconds": fit_s, "identical_rerun": identical,
               "max_abs_diff": 0.0, "trainable_params": 10, "peak_memory_mb": 1.0,
               "n_eval": 872, "n_train": 512}  # fmt: skip
    return [{**ident, "metric": k, "value": v, **ctx} for k, v in metrics.items()]


def test_aggregate_and_report_keep_missing_jobs_visible(tmp_path):
    paths = []
    for model, method, acc, fit_s in [("pillm-s0", "pil_lora", 0.8, 0.5),
                                      ("pillm-s0", "lora", 0.82, 4.0),
                                      ("pillm-s1", "pil_lora", 0.7, 0.5)]:  # fmt: skip
        d = tmp_path / model / method
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps(_records(model, method, acc, fit_s)))
        curve = [{"step": 5, "fit_seconds": 1.0, "accuracy": 0.6},
                 {"step": 10, "fit_seconds": 2.5, "accuracy": 0.81}]  # fmt: skip
        pl.DataFrame(
            curve if method == "lora" else [{"step": 0, "fit_seconds": fit_s, "accuracy": acc}]
        ).with_columns(  # fmt: skip
            model=pl.lit(model), method=pl.lit(method), model_group=pl.lit("pillm")
        ).write_parquet(d / "curve.parquet")
        paths.append(d)
    jobs = [f"{m}/{k}" for m in ("pillm-s0", "pillm-s1") for k in ("pil_lora", "lora")]
    aggregate_lora([str(p / "metrics.json") for p in paths],
                   [str(p / "curve.parquet") for p in paths], jobs, str(tmp_path))  # fmt: skip
    summary = pl.read_parquet(tmp_path / "lora.parquet")
    assert summary.height == 4
    missing = summary.filter((pl.col("model") == "pillm-s1") & (pl.col("method") == "lora"))
    assert missing["accuracy"][0] is None and missing["model_group"][0] == "pillm"
    params = {"name": "t", **{k: v for k, v in LORA_CFG.items()}}
    rep = LoraReport(summary, pl.read_parquet(tmp_path / "lora_curves.parquet"), params)
    assert rep.time_to_pil("pillm") == (2.5, 1, 1)  # s1 has no LoRA run: not counted
    macros = rep.numbers()
    assert macros["LoraPillmPilLoraAcc"] == "75.0 $\\pm$ 7.1"
    assert macros["LoraPillmLoraAcc"] == "82.0"
    assert macros["LoraPillmFitRatio"] == "8.0$\\times$"
    assert macros["LoraPillmTimeToPilRatio"] == "5.0$\\times$"
    assert macros["LoraPillmTimeToPil"] == "2.50\\,s"
    assert macros["LoraPillmPilLoraIdentical"] == "2/2"
    assert macros["LoraMiniLMLoraAcc"] == "--"  # every macro defined, absent groups too
    assert macros["LoraNJobs"] == "3" and macros["LoraNExpected"] == "4"
    render_lora_tables(str(tmp_path), params, str(REPO / "paper/templates"), str(tmp_path / "t.tex"),
                       str(tmp_path / "n.tex"))  # fmt: skip
    table = (tmp_path / "t.tex").read_text()
    assert "75.0 $\\pm$ 7.1 & 0.50" in table and "\\label{tab:lora}" in table
    assert "\\newcommand{\\LoraPillmLoraFit}{4.00}" in (tmp_path / "n.tex").read_text()
    lora_figure(str(tmp_path), str(tmp_path / "f.pdf"), str(tmp_path / "f.png"))
    assert (tmp_path / "f.pdf").stat().st_size > 0 and (tmp_path / "f.png").stat().st_size > 0
