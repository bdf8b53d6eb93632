"""LoRA, the gradient opponent of the SST-2 study: what it adapts, its head, that it fits, and
the rule that says whether it trained."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binom

from pillm.data.sst2 import Split
from pillm.lora.methods import LORA_TARGETS, ReadoutHead, chance_loss, fit_lora, trained
from pillm.lora.run import run_fits

from .test_lora import LORA, _bert_base, _gpt_base, _sentences

# the linear maps of one block, by base kind: every one carries an adapter under all_linear
BLOCK_MAPS = {
    "causal": {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"},
    "encoder": {
        "attention.self.query", "attention.self.key", "attention.self.value",
        "attention.output.dense", "intermediate.dense", "output.dense",
    },
}  # fmt: skip


def _adapted(weights: dict[str, torch.Tensor]) -> set[str]:
    """Adapted module names without the block prefix (``blocks.0.`` / ``encoder.layer.0.``)."""
    names = {k.split(".lora_")[0] for k in weights if ".lora_" in k}
    return {n.split(".", 3)[-1] if n.startswith("encoder.") else n.split(".", 2)[-1] for n in names}


@pytest.mark.parametrize("build", [_gpt_base, _bert_base])
def test_all_linear_adapts_every_block_map_and_no_head(build):
    base = build()
    data = _sentences(48, 0)
    ids = base.tokenize(data.sentences, 8)
    fit = (ids[:32], data.labels[:32])
    dev = (ids[32:], data.labels[32:])
    res = fit_lora(base, fit, dev, replace(LORA, lora_modules="all_linear"), 1e-2, 0, "cpu")
    assert _adapted(res.weights) == BLOCK_MAPS[base.kind]
    n_blocks = 2  # the toy models' layers: each block's maps adapted, nothing outside them
    assert sum(".lora_A" in k for k in res.weights) == n_blocks * len(BLOCK_MAPS[base.kind])
    assert not any(("lm_head" in k or "pooler" in k) for k in res.weights)
    attention = fit_lora(base, fit, dev, replace(LORA, lora_modules="attention"), 1e-2, 0, "cpu")
    expect = {"attn.qkv"} if base.kind == "causal" else {"attention.self.query",
                                                         "attention.self.value"}  # fmt: skip
    assert _adapted(attention.weights) == expect
    assert set(LORA_TARGETS) == {(k, m) for k in BLOCK_MAPS for m in ("attention", "all_linear")}


def test_readout_head_starts_at_chance_and_reads_the_ridge_features():
    """Zero-initialised: uniform scores (loss ln 2) at the start; it reads the row-standardised
    state, so a per-sentence shift and positive scale of the pooled state change nothing."""
    head = ReadoutHead(6)
    x = torch.randn(5, 6)
    assert torch.equal(head(x), torch.zeros(5, 2))
    with torch.no_grad():
        head.linear.weight.normal_()
        head.linear.bias.normal_()
    shifted = 3.0 * x + torch.randn(5, 1)
    torch.testing.assert_close(head(shifted), head(x), rtol=1e-4, atol=1e-4)


def _leading(n: int, seed: int) -> Split:
    """'good'/'bad' first, then filler words: the rule survives truncation to 8 tokens."""
    rng = np.random.default_rng(seed)
    words = ["the", "film", "was", "a", "plot", "and"]
    labels = rng.integers(0, 2, n)
    sents = [" ".join(["good" if y else "bad", *rng.choice(words, 3)]) for y in labels]
    return Split(sents, labels.astype(np.int64))


@pytest.mark.parametrize("build", [_gpt_base, _bert_base])
def test_lora_fits_a_learnable_rule_through_every_adapter(build):
    """A rule every sentence carries: the kept weights' training loss falls well below chance
    and they classify the fit sentences, and every adapter received gradient through the
    frozen base (each lora_B left its zero start)."""
    base = build()
    data = _leading(160, 11)
    fit, dev = data.take(np.arange(128)), data.take(np.arange(128, 160))
    cfg = replace(LORA, max_steps=240, eval_every=16, patience=99, lrs=[3e-3], lr_extend=0,
                  lora_modules="all_linear")  # fmt: skip
    job = run_fits(base, "lora", fit, dev, _leading(40, 12), cfg, 0, "cpu")
    m = job.metrics
    assert m["train_loss_last"] < chance_loss(fit.labels) - 0.3  # the curve's last window
    assert m["train_accuracy"] >= 0.95 and job.accuracy >= 0.9
    lora_b = [v for k, v in job.timed.weights.items() if "lora_B" in k]
    assert len(lora_b) == 2 * len(BLOCK_MAPS[base.kind])
    assert all(float(v.abs().max()) > 0 for v in lora_b)
    assert math.isfinite(m["train_loss_first"]) and m["train_loss_first"] > m["train_loss_last"]


# ---------------------------------------------------------------- did it train


N, MAJORITY, ALPHA = 4096, 0.56, 1e-3
CHANCE = -(MAJORITY * math.log(MAJORITY) + (1 - MAJORITY) * math.log(1 - MAJORITY))


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly (small n)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def test_majority_class_predictions_did_not_train():
    """The collapse the rule is for: every sentence predicted as the majority class, loss at
    chance. A loss a little below chance does not rescue it: the accuracy arm fails alone."""
    k = round(MAJORITY * N)
    ok, p = trained(CHANCE, CHANCE, k, N, MAJORITY, ALPHA)
    assert not ok and 0.4 < p < 0.6
    ok, p = trained(CHANCE - 0.05, CHANCE, k, N, MAJORITY, ALPHA)
    assert not ok and p > ALPHA


def test_a_lead_over_the_majority_class_on_many_sentences_trained():
    """64 % right on 4,096 fit sentences whose majority class is 56 %: far beyond luck, though
    its loss (0.644) lies only 0.04 nats below chance."""
    ok, p = trained(0.644, CHANCE, round(0.64 * N), N, MAJORITY, ALPHA)
    assert ok and p < 1e-20 and CHANCE - 0.644 < 0.05


def test_a_loss_at_or_above_chance_did_not_train():
    """The accuracy arm passes; the kept weights' loss does not lie below chance."""
    k = round(0.64 * N)
    for loss in (CHANCE, CHANCE + 0.01, math.nan):
        ok, p = trained(loss, CHANCE, k, N, MAJORITY, ALPHA)
        assert not ok
    assert trained(CHANCE + 0.01, CHANCE, k, N, MAJORITY, ALPHA)[1] < 1e-20


def test_the_same_lead_on_few_sentences_did_not_train():
    """64 % of 64 sentences against a 56 % majority class: 41 right where 35.8 are expected,
    which luck gives about one time in eight. The test's power follows n."""
    ok, p = trained(0.644, CHANCE, 41, 64, MAJORITY, ALPHA)
    assert not ok and p == pytest.approx(_tail(41, 64, MAJORITY), rel=1e-9)
    assert 0.1 < p < 0.15


def test_trained_flips_where_the_binomial_p_crosses_alpha():
    """The least number right whose p lies below alpha trains; one fewer does not."""
    k = next(k for k in range(N) if binom.sf(k - 1, N, MAJORITY) < ALPHA)
    assert trained(0.6, CHANCE, k, N, MAJORITY, ALPHA)[0]
    assert not trained(0.6, CHANCE, k - 1, N, MAJORITY, ALPHA)[0]
    assert trained(0.6, CHANCE, k - 1, N, MAJORITY, 10 * ALPHA)[0]  # alpha is the threshold
