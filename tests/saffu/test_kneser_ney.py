"""Interpolated Kneser-Ney (pillm.saffu.kneser_ney): hand-computed probabilities on a toy
corpus, normalisation over the whole vocabulary, modified discounts, the baseline job."""

import json
import math
import random

import numpy as np
import pytest

from pillm.saffu.kneser_ney import KneserNey, _discounts

# Toy corpus 0 1 0 2 0 1 over V = 3 types. Bigrams: (0,1) x2, (1,0), (0,2), (2,0).
TOY = [0, 1, 0, 2, 0, 1]


def test_bigram_matches_hand_computed_probabilities():
    m = KneserNey(TOY, order=2, vocab=3, discount=0.5)
    # Unigram continuation counts: 0 follows 1 and 2 -> 2; 1 follows 0 -> 1; 2 follows 0 -> 1.
    # Total 4, back-off mass 3 x 0.5 = 1.5 -> P1(w) = (N(.w) - 0.5) / 4 + 1.5 / 4 / 3.
    p1 = {0: 1.5 / 4 + 0.125, 1: 0.5 / 4 + 0.125, 2: 0.5 / 4 + 0.125}
    assert p1 == pytest.approx({0: 0.5, 1: 0.25, 2: 0.25})
    assert dict(m.orders[1].counts) == {(0,): 2, (1,): 1, (2,): 1}
    for w, p in p1.items():
        assert m.prob([], w) == pytest.approx(p)
    # After 0: c(0 1) = 2, c(0 2) = 1, total 3, mass 2 x 0.5 = 1.
    assert m.prob([0], 1) == pytest.approx((2 - 0.5) / 3 + 1 / 3 * 0.25)  # 7/12
    assert m.prob([0], 2) == pytest.approx((1 - 0.5) / 3 + 1 / 3 * 0.25)  # 1/4
    assert m.prob([0], 0) == pytest.approx(1 / 3 * 0.5)  # unseen after 0: back-off only
    # After 1: only (1, 0), total 1, mass 0.5.
    assert m.prob([1], 0) == pytest.approx(0.5 + 0.5 * 0.5)
    assert m.prob([1], 2) == pytest.approx(0.5 * 0.25)


def test_unseen_context_falls_back_to_the_lower_order():
    m = KneserNey([0, 1, 0, 1, 2], order=3, vocab=4, discount=0.5)
    # History (2, 2) never occurs as a context at order 3, nor (2,) at order 2 (2 ends the
    # corpus): the prediction is the unigram level's.
    assert m.prob([2, 2], 0) == pytest.approx(m.prob([], 0))
    # Type 3 never occurs: positive (the uniform share of the back-off mass), never zero.
    assert 0 < m.prob([0, 1], 3) < 0.1


@pytest.mark.parametrize("discount", [0.3, 1.0, "modified"])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_distribution_sums_to_one(order, discount):
    rng = random.Random(order)
    vocab = 12
    tokens = [rng.randrange(vocab - 2) for _ in range(400)]  # two types never seen
    m = KneserNey(tokens, order, vocab, discount)
    for history in ([], [0], [3, 4], [1, 2, 5], [11, 10, 11], tokens[7:10]):
        probs = [m.prob(history, w) for w in range(vocab)]
        assert sum(probs) == pytest.approx(1.0, abs=1e-12)
        assert min(probs) > 0


def test_modified_discounts_follow_chen_goodman():
    from collections import Counter

    counts = Counter({i: c for i, c in enumerate([1] * 10 + [2] * 4 + [3] * 2 + [4] * 1 + [9])})
    y = 10 / (10 + 2 * 4)
    d1, d2, d3 = _discounts(counts, "modified")
    assert d1 == pytest.approx(1 - 2 * y * 4 / 10)
    assert d2 == pytest.approx(2 - 3 * y * 2 / 4)
    assert d3 == pytest.approx(3 - 4 * y * 1 / 2)
    with pytest.raises(ValueError, match="discount"):
        _discounts(counts, 1.5)


def test_higher_order_fits_a_repetitive_corpus_better_and_nll_counts_tokens():
    tokens = [0, 1, 2, 3] * 50
    test = [0, 1, 2, 3] * 5
    nll1, n1 = KneserNey(tokens, 1, 4, discount=0.5).nll(test)
    nll3, n3 = KneserNey(tokens, 3, 4, discount=0.5).nll(test)
    assert n1 == n3 == len(test) - 1
    assert nll3 < 0.2 * nll1  # the trigram predicts the cycle, the unigram cannot
    assert nll1 / n1 == pytest.approx(math.log(4), rel=0.05)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="order"):
        KneserNey(TOY, 0, 3)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        KneserNey(TOY, 2, 2)


def test_job_writes_one_run_per_fraction_and_seed(tmp_path):
    from pillm.saffu.kn_job import run_kneser_ney

    rng = np.random.default_rng(0)
    for split, n in (("train", 2000), ("valid", 300), ("test", 400)):
        np.save(tmp_path / f"{split}.npy", rng.integers(0, 20, n))
    meta = {"vocab_size": 20, "bytes": {"test": 1600}, "corpus": "toy", "tokenizer": "toy",
            "policy": "toy"}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    params = {"kn": {"orders": [1, 2]}, "fractions": [0.25], "seeds": [0, 1]}
    run_kneser_ney(params, tmp_path, tmp_path / "out")
    rows = json.loads((tmp_path / "out/metrics.json").read_text())
    runs = {(r["fraction"], r["seed"]) for r in rows}
    assert runs == {(0.25, 0), (0.25, 1), (1.0, 0), (1.0, 1)}
    get = {(r["fraction"], r["seed"], r["metric"]): r["value"] for r in rows}
    assert get[(0.25, 0, "train_tokens")] == 500 and get[(1.0, 1, "train_tokens")] == 2000
    assert get[(0.25, 0, "window_offset")] != get[(0.25, 1, "window_offset")]
    # uniform random tokens: the unigram order wins on held-out data, near log(20) nats
    assert get[(1.0, 0, "order")] == 1
    assert all(r["git_rev"] and r["device"] == "cpu" for r in rows)  # provenance of every run
    assert get[(1.0, 0, "test_loss")] == pytest.approx(math.log(20), rel=0.05)


def test_an_edge_order_pick_extends_the_grid_one_order_at_a_time():
    from pillm.saffu.config import KneserNeyConfig
    from pillm.saffu.kn_job import fit_window

    # a second-order Markov chain: the trigram (order 3) is the true model
    rng = np.random.default_rng(0)
    v = 6
    trans = rng.dirichlet(np.full(v, 0.2), size=(v, v))
    seq = [0, 1]
    for _ in range(12000):
        seq.append(int(rng.choice(v, p=trans[seq[-2], seq[-1]])))
    train, held = seq[:10000], seq[10000:]

    def fit(orders, extend):
        return fit_window(train, held, held, v, KneserNeyConfig(orders=orders, order_extend=extend))

    up, down = fit((1, 2), 3), fit((5, 6), 3)
    for out in (up, down):  # from either side the walk stops at the true order, off the edge
        assert (out["order"], out["order_edge_hit"], out["order_on_edge"]) == (3, 1, 0)
    assert up["order_extensions"] == 2 and "val_loss_order4" in up  # 3, then 4 is worse
    assert down["order_extensions"] == 3 and "val_loss_order2" in down
    capped = fit((1, 2), 0)
    assert (capped["order"], capped["order_on_edge"], capped["order_extensions"]) == (2, 1, 0)
    # order 1 is no edge: the unigram has nothing below it
    noise = rng.integers(0, 20, 3000).tolist()
    low = fit_window(noise[:2500], noise[2500:], noise[2500:], 20,
                     KneserNeyConfig(orders=(1, 2), order_extend=2))  # fmt: skip
    assert (low["order"], low["order_edge_hit"], low["order_extensions"]) == (1, 0, 0)


def test_lm_contribution_table_gets_the_kneser_ney_row():
    import polars as pl

    from pillm.lm.comparisons import LMReport

    summary = pl.DataFrame(
        {"variant": ["baseline"] * 2, "metric": ["test_ppl", "test_loss"],
         "mean": [200.0, math.log(200.0)], "std": [1.0, 0.005], "ci95": [2.0, 0.01],
         "n": [3, 3], "n_expected": [3, 3]}
    )  # fmt: skip
    runs = pl.DataFrame(
        {"variant": ["baseline"] * 6, "seed": [0, 1, 2] * 2,
         "metric": ["test_ppl"] * 3 + ["test_loss"] * 3,
         "value": [199.0, 200.0, 201.0] + [math.log(v) for v in (199.0, 200.0, 201.0)]}
    )  # fmt: skip
    unigram = math.log(800.0)
    rep = LMReport(summary, runs, ["baseline"], unigram)
    assert len(rep.contribution_rows()) == 2  # no n-gram summary: unigram and baseline only
    rep.kn = {
        "test_ppl": {"mean": 250.0, "ci95": None},
        "test_loss": {"mean": math.log(250.0)},
        "order": {"mean": 3.0},
    }
    row = rep.contribution_rows()[1]
    assert row[0] == "Kneser-Ney 3-gram (train counts)" and row[1] == "250.0"
    assert row[2] == "80.0"  # PPL_full / PPL_kn
    share = (unigram - math.log(250.0)) / (unigram - math.log(200.0))
    assert row[3] == f"{100 * share:.1f}"
