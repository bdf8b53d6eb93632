"""SAFFU explicit solution: exact optimality on one-hot inputs (against long gradient descent),
translation invariance, the gap on mixed inputs, the context features; one job end to end (warm
vs the log-unigram cold start, rate chosen on held-out data, early stopping, train windows, the
smoothing grid extended past its edge), determinism, and aggregation into the claim frame, the
tables and macros."""

import json
import math

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F

from pillm.saffu.aggregate import aggregate_saffu
from pillm.saffu.config import SaffuJobConfig
from pillm.saffu.data import arm, fraction_tag, train_window
from pillm.saffu.figures import saffu_figures
from pillm.saffu.kn_job import run_kneser_ney
from pillm.saffu.model import (
    SaffuLM,
    SparseRowsFixedOrder,
    SparseRowsTimesW,
    context_features,
    cooccurrence,
    csr_columns,
    csr_rows,
    evaluate,
    explicit_solution,
    heldout_loss,
    n_inputs,
    type_index,
    unigram,
)
from pillm.saffu.run import run_saffu
from pillm.saffu.tables import render_saffu_tables
from pillm.saffu.train import early_stop_rows, train_adamw

REPO_TEMPLATES = __import__("pathlib").Path(__file__).resolve().parents[2] / "paper/templates"


def _ce(W: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(X @ W, y)


def _autograd(W: torch.Tensor, X, y) -> torch.Tensor:
    W = W.clone().requires_grad_(True)
    return torch.autograd.grad(_ce(W, X, y), W)[0]


def _gradient(W: torch.Tensor, X, y) -> torch.Tensor:
    """d mean CE / dW = X^T (softmax(X W) - Y) / N."""
    return X.T @ ((X @ W).softmax(1) - F.one_hot(y, W.shape[1]).double()) / X.shape[0]


def _gradient_descent(W0: torch.Tensor, X, y, steps: int, lr: float) -> torch.Tensor:
    W = W0.clone()
    for _ in range(steps):
        W -= lr * _gradient(W, X, y)
    return W


def _toy(one_hot: bool, n: int = 4, vocab: int = 3, rows: int = 2000, seed: int = 0):
    """Rows x (one-hot, or the average of two one-hots) and targets from a random conditional."""
    g = torch.Generator().manual_seed(seed)
    cond = torch.randn(n, vocab, generator=g, dtype=torch.float64).softmax(1)  # p(y | i)
    a = torch.randint(0, n, (rows,), generator=g)
    X = F.one_hot(a, n).double()
    logits = cond[a].log()
    if not one_hot:
        b = torch.randint(0, n, (rows,), generator=g)
        X = (X + F.one_hot(b, n).double()) / 2
        logits = logits + cond[b].log()  # targets depend on both inputs (a product of experts)
    y = torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(1)
    return X, y


def test_explicit_solution_is_the_gradient_descent_optimum_on_one_hot_inputs():
    X, y = _toy(one_hot=True)
    Fm = X.T @ F.one_hot(y, 3).double()
    assert (Fm > 0).all()  # every count positive: the optimum is attained
    W_exp = explicit_solution(Fm).double()
    # stationary: the gradient X^T (P - Y) / N vanishes
    g = _gradient(W_exp, X, y)
    torch.testing.assert_close(g, _autograd(W_exp, X, y))
    assert g.abs().max() < 1e-6  # float32 rounding of W only
    # long full-batch gradient descent from zero reaches the same predictions and loss
    W_gd = _gradient_descent(torch.zeros(4, 3, dtype=torch.float64), X, y, 600, lr=4.0)
    p_gd, p_exp = W_gd.softmax(1), W_exp.softmax(1)
    torch.testing.assert_close(p_gd, p_exp, atol=1e-6, rtol=0)
    torch.testing.assert_close(p_exp, Fm / Fm.sum(1, keepdim=True), atol=1e-6, rtol=0)
    assert _ce(W_gd, X, y) >= _ce(W_exp, X, y) - 1e-7  # nothing beats the explicit solution
    # the weights themselves differ only by a per-input (row) translation
    diff = W_gd - W_exp
    torch.testing.assert_close(diff, diff[:, :1].expand_as(diff), atol=1e-5, rtol=0)


def test_translation_along_inputs_changes_nothing_but_along_outputs_does():
    torch.manual_seed(0)
    W = torch.randn(6, 5, dtype=torch.float64)
    X = torch.rand(10, 6, dtype=torch.float64)
    X = X / X.sum(1, keepdim=True)  # mixed, non-negative, 1-normalised inputs
    c = torch.randn(6, 1, dtype=torch.float64)
    torch.testing.assert_close((X @ (W + c)).softmax(1), (X @ W).softmax(1))
    d = torch.randn(1, 5, dtype=torch.float64)
    assert ((X @ (W + d)).softmax(1) - (X @ W).softmax(1)).abs().max() > 1e-3  # a bias
    # and for 1-normalised inputs, adding d to every row is exactly an output bias
    torch.testing.assert_close(X @ (W + d), X @ W + d)


def test_explicit_solution_is_only_a_warm_start_on_mixed_inputs():
    """Mixed inputs: softmax(x log F) is a geometric pool of the rows' conditionals, not a
    stationary point; gradient descent from it still lowers the loss."""
    X, y = _toy(one_hot=False)
    assert (X.sum(1) - 1).abs().max() < 1e-12
    Fm = X.T @ F.one_hot(y, 3).double()
    W_exp = explicit_solution(Fm).double()
    g = _gradient(W_exp, X, y)
    torch.testing.assert_close(g, _autograd(W_exp, X, y))
    assert g.abs().max() > 1e-3
    W_gd = _gradient_descent(W_exp, X, y, 600, lr=4.0)
    gap = float(_ce(W_exp, X, y) - _ce(W_gd, X, y))
    assert gap > 1e-3
    # ... while the explicit start is far better than a uniform (zero) start
    assert _ce(W_exp, X, y) < _ce(torch.zeros_like(W_exp), X, y)


def test_cooccurrence_equals_dense_xty_and_smoothing_is_a_distribution():
    tokens = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4])
    index, m = type_index(tokens, 10, 6)
    idx, wts = context_features(tokens, index, m, 3, 2, "cat")
    dense = torch.zeros(idx.shape[0], 2 * m, dtype=torch.float64)
    dense.scatter_add_(1, idx, wts.double())
    y = tokens[1:]
    f = cooccurrence(idx, wts, y, 2 * m, 10)
    torch.testing.assert_close(f, dense.T @ F.one_hot(y, 10).double())
    prior = torch.full((10,), 0.1, dtype=torch.float64)
    W = explicit_solution(f, 0.5, prior)
    torch.testing.assert_close(W.double().exp().sum(1), torch.ones(2 * m, dtype=torch.float64))
    with pytest.raises(ValueError, match="prior"):
        explicit_solution(f, 0.5)


def test_type_index_keeps_top_types_and_buckets_the_rest():
    train = torch.tensor([5, 5, 5, 2, 2, 7, 1])
    index, m = type_index(train, 8, 2)
    assert m == 3
    assert index[5] == 0 and index[2] == 1
    assert all(index[t] == 2 for t in (0, 1, 3, 4, 6, 7))


@pytest.mark.parametrize("agg", ["sum", "cat"])
def test_features_are_nonnegative_one_normalised_with_the_right_shapes(agg):
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 50, (200,), generator=g)
    index, m = type_index(tokens, 50, 20)
    block, radius = 5, 3
    idx, wts = context_features(tokens, index, m, block, radius, agg)
    assert idx.shape == wts.shape == (199, block + radius)
    assert (wts >= 0).all()
    torch.testing.assert_close(wts.sum(1), torch.ones(199))
    n_in = n_inputs(agg, m)
    assert n_in == (m if agg == "sum" else 2 * m)
    assert idx.min() >= 0 and idx.max() < n_in
    # the first predicted token (position 1) sees only token 0: all its weight on that type
    t0 = int(index[tokens[0]])
    live = wts[0] > 0
    expected = {t0, t0 + m} if agg == "cat" else {t0}
    assert set(idx[0][live].tolist()) == expected
    # radial weights fall off as 1/k: the most recent token weighs most
    r = wts[50, block:]
    torch.testing.assert_close(r / r[0], torch.tensor([1, 1 / 2, 1 / 3]))
    # the model's logits equal the dense x W
    model = SaffuLM(n_in, 50)
    torch.nn.init.normal_(model.weight)
    dense = torch.zeros(199, n_in).scatter_add_(1, idx, wts)
    torch.testing.assert_close(model(idx, wts), dense @ model.weight, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="aggregation"):
        n_inputs("mean", m)


def test_sparse_products_match_embedding_bag_in_values_and_gradients():
    """The CUDA path (two CSR products) against embedding_bag, run here on CPU tensors: rows
    with repeated inputs, zero weights (missing context) and inputs no row uses."""
    g = torch.Generator().manual_seed(3)
    n_in, vocab, b, k = 12, 30, 40, 5
    idx = torch.randint(0, n_in - 3, (b, k), generator=g)  # the last 3 inputs never appear
    idx[0] = 4  # one input five times in a row
    wts = torch.rand(b, k, generator=g)
    wts[1, 2:] = 0.0  # missing context: weight 0
    wts = wts / wts.sum(1, keepdim=True)
    weight = torch.randn(n_in, vocab, generator=g)
    up = torch.randn(b, vocab, generator=g)  # an upstream gradient
    w1 = weight.clone().requires_grad_()
    sparse = SparseRowsTimesW.apply(idx, wts, w1)
    (sparse * up).sum().backward()
    w2 = weight.clone().requires_grad_()
    bag = F.embedding_bag(idx, w2, per_sample_weights=wts, mode="sum")
    (bag * up).sum().backward()
    torch.testing.assert_close(sparse, bag, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w1.grad, w2.grad, atol=1e-6, rtol=1e-6)
    assert w1.grad[-3:].abs().max() == 0  # unused inputs: no gradient
    w3 = weight.clone().requires_grad_()
    (SparseRowsFixedOrder.apply(idx, wts, w3) * up).sum().backward()  # CPU: bag's backward
    torch.testing.assert_close(w3.grad, w2.grad, atol=1e-6, rtol=1e-6)
    # the transpose built by sorting is the transpose of the rows
    dense = csr_rows(idx, wts, n_in).to_dense()
    torch.testing.assert_close(csr_columns(idx, wts, n_in).to_dense(), dense.T)


# ---------------------------------------------------------------- one job, end to end

V = 40
SETTING = "cat_b4_r2"
CFG = dict(
    top_types=24,
    seeds=[0, 1],
    inits=["explicit", "random"],
    alphas=[1e-4, 1e-3],  # far below the pick: the grid must be extended past its edge
    alpha_extend=3,
    init_std=0.02,
    lrs=[0.03, 0.1],
    lr_extend=0,
    max_steps=40,
    patience=2,
    batch_size=64,
    betas=[0.9, 0.99],
    weight_decay=0.0,
    warmup_steps=2,
    eval_every=5,
    eval_chunk=128,
    settings={SETTING: dict(agg="cat", block=4, radius=2)},
)


@pytest.fixture(scope="module")
def tokens_dir(tmp_path_factory):
    """A first-order Markov chain over V types: the previous token carries real information."""
    d = tmp_path_factory.mktemp("tokens")
    rng = np.random.default_rng(0)
    trans = rng.dirichlet(np.full(V, 0.1), size=V)
    seq = [0]
    for _ in range(6000):
        seq.append(rng.choice(V, p=trans[seq[-1]]))
    seq = np.array(seq, dtype=np.int32)
    splits = {"train": seq[:4000], "valid": seq[4000:4600], "test": seq[4600:]}
    for s, a in splits.items():
        np.save(d / f"{s}.npy", a)
    meta = {
        "vocab_size": V,
        "bytes": {s: 3 * len(a) for s, a in splits.items()},
        "corpus": "toy",
        "tokenizer": "toy-40",
        "policy": "local:toy:train=first 4000, valid=next 600, test=rest",
    }
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def _records(path) -> dict[tuple[int, str, str], float]:
    """(seed, init, metric) -> value of one job's metrics.json."""
    return {(r["seed"], r["init"], r["metric"]): r["value"] for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def jobs(tokens_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("saffu")
    out = {}
    for fraction in (1.0, 0.25):
        d = root / SETTING / fraction_tag(fraction)
        run_saffu(SETTING, fraction, CFG, tokens_dir, d, "cpu")
        out[fraction] = d
    d = root / "kneser_ney"
    run_kneser_ney({"kn": {"orders": [1, 2]}, "fractions": [0.25], "seeds": CFG["seeds"]},
                   tokens_dir, d)  # fmt: skip
    out["kn"] = d
    return out


def test_cold_start_is_the_unigram_and_warm_starts_lower(jobs, tokens_dir):
    r = _records(jobs[1.0] / "metrics.json")
    train = torch.from_numpy(np.load(tokens_dir / "train.npy").astype(np.int64))
    test = torch.from_numpy(np.load(tokens_dir / "test.npy").astype(np.int64))
    u = unigram(train[1:], V)
    unigram_loss = float(-u.log()[test[1:]].mean())
    # log-unigram rows (+ N(0, 0.02^2)): the step-0 model is the unigram model
    assert r[(0, "random", "unigram_test_loss")] == pytest.approx(unigram_loss, rel=1e-6)
    valid = torch.from_numpy(np.load(tokens_dir / "valid.npy").astype(np.int64))
    valid_unigram = float(-u.log()[valid[1:]].mean())
    assert r[(1, "random", "init_val_loss")] == pytest.approx(valid_unigram, abs=0.01)
    assert r[(0, "explicit", "init_test_ppl")] == pytest.approx(
        math.exp(r[(0, "explicit", "init_test_loss")])
    )
    assert r[(0, "explicit", "init_val_loss")] < r[(0, "random", "init_val_loss")] - 0.3
    for seed in CFG["seeds"]:
        for init in CFG["inits"]:
            assert r[(seed, init, "test_ppl")] == pytest.approx(
                math.exp(r[(seed, init, "test_loss")])
            )
            assert r[(seed, init, "test_predicted")] == len(test) - 1
            # AdamW from the start improves held-out loss, and the best point is what is kept
            assert r[(seed, init, "val_loss")] <= r[(seed, init, "init_val_loss")]


def test_rate_chosen_at_the_first_seed_and_runs_stop_on_patience(jobs):
    r = _records(jobs[1.0] / "metrics.json")
    for init in CFG["inits"]:
        assert r[(0, init, "lr_tuned_here")] == 1 and r[(1, init, "lr_tuned_here")] == 0
        assert r[(0, init, "lr")] == r[(1, init, "lr")] in CFG["lrs"]
        for seed in CFG["seeds"]:
            steps, best = r[(seed, init, "train_steps")], r[(seed, init, "best_step")]
            if r[(seed, init, "stopped_at_step_cap")]:
                assert (
                    steps == CFG["max_steps"] and steps - best < CFG["patience"] * CFG["eval_every"]
                )
            if r[(seed, init, "hit_step_cap")]:
                assert steps == best == CFG["max_steps"] and r[(seed, init, "stopped_at_step_cap")]
            else:  # stopped: `patience` evaluations after the best one, or at the cap
                assert steps - best == CFG["patience"] * CFG["eval_every"] or (
                    steps == CFG["max_steps"]
                )
    curve = pl.read_parquet(jobs[1.0] / "curve.parquet")
    tried = curve.filter((pl.col("seed") == 0) & (pl.col("init") == "random"))["lr"].unique()
    assert sorted(tried.to_list()) == CFG["lrs"]  # the first seed tried the grid
    later = curve.filter(pl.col("seed") == 1).group_by("init").agg(pl.col("lr").n_unique())
    assert later["lr"].to_list() == [1, 1]  # one rate per init at later seeds


def test_a_later_seed_alone_equals_the_same_seed_after_the_first(jobs, tokens_dir, tmp_path):
    """The pipeline runs one seed a job (pillm.plan.saffu_jobs): seed 1 with its first seed's
    rates read from that job's records is the seed 1 of a job that ran both, bit for bit."""
    both = jobs[1.0] / "metrics.json"
    run_saffu(SETTING, 1.0, {**CFG, "seeds": [1]}, tokens_dir, tmp_path, "cpu", rates_from=both)
    timing = ("_time_s", "_s", "_mb", "tokens_per_s")
    alone = {k: v for k, v in _records(tmp_path / "metrics.json").items()
             if not k[2].endswith(timing)}  # fmt: skip
    after = {k: v for k, v in _records(both).items() if k[0] == 1 and not k[2].endswith(timing)}
    assert alone == after and alone[(1, "random", "lr_reused")] == 0  # same setting: no reuse
    curve = pl.read_parquet(tmp_path / "curve.parquet")
    ref = pl.read_parquet(jobs[1.0] / "curve.parquet").filter(pl.col("seed") == 1)
    assert curve.sort("init", "step").equals(ref.sort("init", "step"))


def test_other_settings_reuse_the_main_settings_rates(jobs, tokens_dir, tmp_path):
    cfg = {**CFG, "seeds": [3], "settings": {"sum_b4_r2": dict(agg="sum", block=4, radius=2)}}
    main = jobs[1.0] / "metrics.json"
    run_saffu("sum_b4_r2", 1.0, cfg, tokens_dir, tmp_path, "cpu", rates_from=main)
    r, m = _records(tmp_path / "metrics.json"), _records(main)
    for init in CFG["inits"]:
        assert r[(3, init, "lr")] == m[(0, init, "lr")] and r[(3, init, "lr_reused")] == 1
        assert r[(3, init, "lr_tuned_here")] == 0 and r[(3, init, "tune_time_s")] == 0
        assert r[(3, init, "lr_edge_hit")] == m[(0, init, "lr_edge_hit")]
    curve = pl.read_parquet(tmp_path / "curve.parquet")
    assert curve.group_by("init").agg(pl.col("lr").n_unique())["lr"].to_list() == [1, 1]
    rows = [r for r in json.loads(main.read_text()) if r["init"] == "explicit"]
    (tmp_path / "warm_only.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="no chosen rate of the 'random' start"):
        run_saffu("sum_b4_r2", 1.0, cfg, tokens_dir, tmp_path, "cpu",
                  rates_from=tmp_path / "warm_only.json")  # fmt: skip


def test_smoothing_grid_is_extended_past_its_edge(jobs):
    r = _records(jobs[1.0] / "metrics.json")
    assert r[(0, "explicit", "alpha_edge_hit")] == 1
    assert r[(0, "explicit", "alpha_extensions")] >= 1
    assert r[(0, "explicit", "alpha")] > max(CFG["alphas"])  # the pick lies beyond the grid
    # one point (x10) per extension until the pick is interior: the last one added is past it
    assert r[(0, "explicit", "alpha_on_edge")] == 0
    assert r[(0, "explicit", "alpha")] == pytest.approx(
        1e-3 * 10 ** (r[(0, "explicit", "alpha_extensions")] - 1)
    )


def test_train_windows_are_seeded_and_shared_by_both_starts(jobs, tokens_dir):
    r = _records(jobs[0.25] / "metrics.json")
    n_train = len(np.load(tokens_dir / "train.npy"))
    for seed in CFG["seeds"]:
        offset, length = train_window(n_train, 0.25, seed)
        for init in CFG["inits"]:
            assert r[(seed, init, "window_offset")] == offset
            assert r[(seed, init, "train_tokens")] == length == 1000
    assert r[(0, "random", "window_offset")] != r[(1, "random", "window_offset")]
    assert train_window(n_train, 1.0, 5) == (0, n_train)
    with pytest.raises(ValueError, match="fraction"):
        train_window(n_train, 1.5, 0)


def test_early_stopping_keeps_the_best_point(tokens_dir):
    job = SaffuJobConfig.from_dict({**CFG, "patience": 1, "eval_every": 2}, "saffu")
    torch.manual_seed(0)
    idx = torch.randint(0, 8, (300, 3))
    wts = torch.full((300, 3), 1 / 3)
    y = torch.randint(0, 5, (300,))
    model = SaffuLM(8, 5)
    start = torch.zeros(8, 5)
    data = (idx, wts, y)
    fit = train_adamw(model, start, data, data, lr=50.0, seed=0, job=job, label="diverge")
    # at lr 50 the first steps overshoot: the held-out loss rises, the run stops after one
    # evaluation without improvement and keeps the start
    assert fit.best_step == 0 and fit.steps == 2 and not fit.hit_cap and not fit.cap_stop
    torch.testing.assert_close(model.weight.data, start)
    # patience running out at the cap's own step: the patience ended it, not the cap
    job = SaffuJobConfig.from_dict({**CFG, "patience": 1, "eval_every": 1, "max_steps": 1},
                                   "saffu")  # fmt: skip
    fit = train_adamw(model, start, data, data, lr=50.0, seed=0, job=job, label="diverge")
    assert fit.steps == 1 and fit.best_step == 0 and not fit.cap_stop and not fit.hit_cap
    # a small rate still improving when the cap comes: ended by the cap, minimum at the end
    job = SaffuJobConfig.from_dict({**CFG, "patience": 2, "eval_every": 2, "max_steps": 4},
                                   "saffu")  # fmt: skip
    fit = train_adamw(model, start, data, data, lr=1e-2, seed=0, job=job, label="capped")
    assert fit.steps == fit.best_step == 4 and fit.cap_stop and fit.hit_cap


def test_early_stopping_on_a_subset_of_held_out_rows_scores_the_pick_on_all_of_them():
    job = SaffuJobConfig.from_dict({**CFG, "early_stop_rows": 50, "max_steps": 20}, "saffu")
    torch.manual_seed(0)

    def rows(n):  # the first input's type sets the target most of the time: there is a signal
        idx = torch.randint(0, 8, (n, 3))
        noise = torch.randint(0, 5, (n,))
        y = torch.where(torch.rand(n) < 0.7, idx[:, 0] % 5, noise)
        return idx, torch.full((n, 3), 1 / 3), y

    train, valid = rows(300), rows(200)
    watched = early_stop_rows(valid, 50)
    assert watched[0].shape[0] == 50 and torch.equal(watched[2], valid[2][::4])
    assert early_stop_rows(valid, 0) is valid and early_stop_rows(valid, 200) is valid
    model = SaffuLM(8, 5)
    fit = train_adamw(model, torch.zeros(8, 5), train, valid, lr=0.1, seed=0, job=job, label="t")
    assert fit.best_step > 0
    # the curve watched the subset; the run's score is every held-out row at its best point
    best_row = next(r for r in fit.curve if r["step"] == fit.best_step)
    assert best_row["val_loss"] == pytest.approx(evaluate(model, *watched, 64)["loss"])
    assert fit.best_val == pytest.approx(evaluate(model, *valid, 64)["loss"])
    assert fit.best_val != pytest.approx(best_row["val_loss"])
    # the training checks skip the accuracy, not a bit of the loss
    full = evaluate(model, *valid, 64)
    assert heldout_loss(model, *valid, 64) == full["loss"] and 0 < full["acc"] < 1
    assert "acc" not in evaluate(model, *valid, 64, accuracy=False)


def test_same_config_gives_identical_metrics_on_cpu(jobs, tokens_dir, tmp_path):
    run_saffu(SETTING, 0.25, CFG, tokens_dir, tmp_path, "cpu")
    a, b = _records(jobs[0.25] / "metrics.json"), _records(tmp_path / "metrics.json")
    for key, value in a.items():
        if not key[2].endswith(("time_s", "tokens_per_s", "peak_memory_mb")):
            assert b[key] == value, key
    # every run carries its job's fixed cost beside the whole job (issue #18)
    starts = {k: v for k, v in b.items() if k[2] == "startup_time_s"}
    assert starts and all(0 < v < b[(*k[:2], "job_time_s")] for k, v in starts.items())


def test_unknown_setting_or_init_names_the_key(tokens_dir, tmp_path):
    with pytest.raises(ValueError, match="saffu.settings"):
        run_saffu("nope", 1.0, CFG, tokens_dir, tmp_path, "cpu")
    with pytest.raises(ValueError, match="saffu.inits"):
        run_saffu(SETTING, 1.0, {**CFG, "inits": ["zeros"]}, tokens_dir, tmp_path, "cpu")
    with pytest.raises(ValueError, match="saffu.alphas"):
        run_saffu(SETTING, 1.0, {**CFG, "alphas": [1.0]}, tokens_dir, tmp_path, "cpu")


def test_aggregation_claims_tables_and_macros_carry_the_run_numbers(jobs, tmp_path, capsys):
    metrics = [str(jobs[f] / "metrics.json") for f in (1.0, 0.25)]
    curves = [str(jobs[f] / "curve.parquet") for f in (1.0, 0.25)]
    params = {"settings": [SETTING], "main_setting": SETTING, "inits": CFG["inits"],
              "fractions": [0.25, 0.5], "seeds": [0, 1], "ablation_seeds": [0],
              "trained_margin": 0.1}  # fmt: skip
    claims = tmp_path / "claims/saffu.parquet"
    aggregate_saffu(metrics, curves, str(jobs["kn"] / "metrics.json"), params, str(tmp_path),
                    str(claims))  # fmt: skip
    assert "missing SAFFU runs" in capsys.readouterr().out  # fraction 0.5 was never run
    summary = pl.read_parquet(tmp_path / "saffu.parquet")
    ppl = summary.filter(
        (pl.col("init") == "random") & (pl.col("metric") == "test_ppl") & (pl.col("fraction") == 1)
    )
    assert ppl["n"].to_list() == [2] and ppl["ci95"][0] is not None
    kn = pl.read_parquet(tmp_path / "kneser_ney.parquet")  # the LM table's row
    assert set(kn["fraction"]) == {1.0} and "test_ppl" in kn["metric"].to_list()
    frame = pl.read_parquet(claims)
    r = _records(jobs[0.25] / "metrics.json")
    warm = frame.filter((pl.col("a") == arm("warm", 0.25)) & (pl.col("seed") == 1))
    assert warm["value"][0] == pytest.approx(r[(1, "explicit", "test_ppl")])
    gain = frame.filter((pl.col("a") == arm("gain", 0.25)) & (pl.col("seed") == 1))
    assert gain["value"][0] == pytest.approx(
        r[(1, "random", "test_loss")] - r[(1, "explicit", "test_loss")]
    )
    assert set(frame["a"]) >= {arm(k, f) for k in ("kn", "explicit", "cold") for f in (0.25, 1)}
    flags = frame.filter(pl.col("metric") == "trained")
    assert set(flags["a"]) == {arm(k, f) for k in ("cold", "gain") for f in (0.25, 1)}
    drop = r[(1, "random", "init_val_loss")] - r[(1, "random", "val_loss")]
    assert flags.filter((pl.col("a") == arm("cold", 0.25)) & (pl.col("seed") == 1))[
        "value"
    ].item() == float(drop >= 0.1)
    lm = pl.DataFrame(
        {
            "variant": ["baseline", "baseline"],
            "metric": ["test_ppl", "params_trainable"],
            "mean": [123.45, 2e6],
            "std": [1.0, 0.0],
            "ci95": [2.5, 0.0],
        }
    )
    lm.write_parquet(tmp_path / "lm.parquet")
    cfg = {k: v for k, v in CFG.items() if k != "settings"}
    cfg.update(main_setting=SETTING, fractions=[0.25, 0.5], ablation_seeds=[0],
               kn={"orders": [1, 2]})  # fmt: skip
    numbers = tmp_path / "saffu_numbers.tex"
    render_saffu_tables(
        str(tmp_path), str(tmp_path / "lm.parquet"), cfg, str(REPO_TEMPLATES), str(tmp_path),
        str(numbers),
    )  # fmt: skip
    full = _records(jobs[1.0] / "metrics.json")
    warm_mean = (full[(0, "explicit", "test_ppl")] + full[(1, "explicit", "test_ppl")]) / 2
    text = numbers.read_text()
    assert f"\\newcommand{{\\SaffuWarmPPL}}{{{warm_mean:.1f}}}" in text
    assert (
        f"\\newcommand{{\\SaffuExplicitPPL}}{{{full[(0, 'explicit', 'init_test_ppl')]:.1f}}}"
        in text
    )
    assert "\\newcommand{\\SaffuBaselinePPL}{123.5}" in text
    assert "\\newcommand{\\SaffuPilPurePPL}{--}" in text  # not in this LM summary
    assert "\\newcommand{\\SaffuAlphaEdgeHits}{" in text
    assert "\\newcommand{\\SaffuColdRuns}{4}" in text  # 2 fractions x 2 seeds
    assert f"\\newcommand{{\\SaffuColdUntrained}}{{{4 - int(flags['value'].sum()) // 2}}}" in text
    for macro, metric in (("StepCapStops", "stopped_at_step_cap"), ("StepCapHits", "hit_step_cap")):
        runs = sum(int(v) for f in (1.0, 0.25)
                   for (_, _, m), v in _records(jobs[f] / "metrics.json").items() if m == metric)  # fmt: skip
        assert f"\\newcommand{{\\Saffu{macro}}}{{{runs}}}" in text  # runs, not cells
    trained = sum(1 for f in (1.0, 0.25)
                  for (_, _, m) in _records(jobs[f] / "metrics.json") if m == "stopped_at_step_cap")  # fmt: skip
    assert f"\\newcommand{{\\SaffuTrainedRuns}}{{{trained}}}" in text
    table = (tmp_path / "saffu.tex").read_text()
    rows = [line for line in table.splitlines() if line.strip().startswith(("GPT", "SAFFU", "Kn"))]
    assert len(rows) == 5 and "123.5 \\ensuremath{\\pm} 2.5" in rows[0]
    assert f"{warm_mean:.1f}" in rows[3]
    sizes = (tmp_path / "saffu_sizes.tex").read_text()
    assert sizes.count("\\\\") >= 3  # fractions 0.25, 0.5 (missing) and 1
    ablation = (tmp_path / "saffu_ablation.tex").read_text()
    assert "cat\\_b4\\_r2 (main)" in ablation
    saffu_figures(str(tmp_path), SETTING, str(tmp_path / "fig"))
    assert {p.name for p in (tmp_path / "fig").iterdir()} == {
        f"saffu_{n}.{ext}" for n in ("curves", "ablation") for ext in ("pdf", "png")
    }


def test_plan_lists_one_job_per_setting_train_fraction_and_seed():
    import yaml

    from pillm.core.config import ConfigError
    from pillm.saffu import plan

    cfg = yaml.safe_load((REPO_TEMPLATES.parents[1] / "config/config.yaml").read_text())
    saffu = cfg["saffu"]
    jobs = plan.saffu_jobs(cfg)
    main, first = saffu["main_setting"], saffu["seeds"][0]
    # the main setting at every fraction (and the full split) and seed, the others on the full
    # split at the ablation seeds
    fractions = sorted({*saffu["fractions"], 1.0})
    assert [(tag, seed) for s, tag, seed in jobs if s == main] == [
        (fraction_tag(f), seed) for f in fractions for seed in saffu["seeds"]
    ]
    others = [(s, tag, seed) for s, tag, seed in jobs if s != main]
    assert {s for s, _, _ in others} == {s["name"] for s in saffu["settings"]} - {main}
    assert {(tag, seed) for _, tag, seed in others} == {
        ("f100", s) for s in saffu["ablation_seeds"]
    }
    assert plan.saffu_fraction(cfg, "f10") == 0.1 and plan.saffu_fraction(cfg, "f100") == 1.0
    with pytest.raises(ConfigError, match="f55"):
        plan.saffu_fraction(cfg, "f55")
    # the first seed chooses at every fraction; later seeds and the other settings reuse
    assert plan.saffu_rates_job(cfg, main, "f10", first) is None
    assert plan.saffu_rates_job(cfg, main, "f10", saffu["seeds"][1]) == f"{main}/f10/seed{first}"
    assert plan.saffu_rates_job(cfg, *others[0]) == f"{main}/f100/seed{first}"
    assert plan.saffu_job_params(cfg, main, saffu["seeds"][1])["seeds"] == [saffu["seeds"][1]]
    with pytest.raises(ConfigError, match=r"saffu\.ablation_seeds: 7 is not one of"):
        plan.saffu_job_params(cfg, others[0][0], 7)
    assert fraction_tag(0.025) == "f2.5" and arm("warm", 0.3) == "warm_f30"


def test_job_args_are_the_saffu_command_line_of_one_job():
    import shlex
    from types import SimpleNamespace

    import yaml

    from pillm.saffu import plan

    cfg = yaml.safe_load((REPO_TEMPLATES.parents[1] / "config/config.yaml").read_text())
    main = cfg["saffu"]["main_setting"]
    w = SimpleNamespace(setting=main, frac="f10", seed="1")
    out = SimpleNamespace(metrics=f"r/saffu/{main}/f10/seed1/metrics.json")
    rates = f"r/saffu/{main}/f10/seed0/metrics.json"
    inputs = SimpleNamespace(tokens=["r/tokens/wikitext2/train.npy"], rates=[rates])
    args = shlex.split(plan.job_args(cfg, w, inputs, out))
    assert args == ["--setting", main, "--fraction", "0.1", "--tokens-dir", "r/tokens/wikitext2",
                    "--params", json.dumps(plan.saffu_job_params(cfg, main, 1), sort_keys=True),
                    "--out-dir", f"r/saffu/{main}/f10/seed1", "--rates-from", rates,
                    "--mps-bulk"]  # fmt: skip
    inputs.rates = []  # a job that chooses its rates
    assert "--rates-from" not in plan.job_args(cfg, w, inputs, out)
    assert plan.job_inputs(cfg, main, "f10", 1)["rates"] == [rates.removeprefix("r/")]
    assert plan.is_bulk(cfg, main, "f10", 1) and not plan.is_bulk(cfg, main, "f10", 0)


@pytest.mark.bench
def test_step_benchmark_agrees_with_embedding_bag(tmp_path):
    """benchmarks/saffu_step.py at a tiny shape on the CPU: every product runs, the model's
    and cuSPARSE's give embedding_bag's logits and gradients, and the figures are written."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "saffu_step.py"
    out = tmp_path / "saffu_step.json"
    subprocess.run([sys.executable, str(script), "--device", "cpu", "--n-in", "64", "--vocab",
                    "500", "--nnz", "4", "--batch", "64", "--eval-chunk", "64", "--repeats", "2",
                    "--out", str(out)], check=True, capture_output=True, text=True)  # fmt: skip
    report = json.loads(out.read_text())
    (row,) = report["rows"]
    assert row["model_max_logit_error"] < 1e-6 and row["csr_max_grad_error"] < 1e-6
    assert report["bag_eval_chunk_ms"] > 0 and report["fixed_eval_chunk_ms"] > 0
    assert "row_adamw_step_ms" not in row  # the kernels do not run on this CPU


def test_rate_search_keeps_only_the_weights_that_can_still_win(monkeypatch):
    """Each rate's run holds a weight-sized copy of its best point; a run beaten by another
    drops it at once (the grid only grows), so at most the best-so-far copies live while the
    next rate trains, and the winner's weights come back."""
    from pillm.saffu import train as saffu_train

    losses = {0.01: 1.2, 0.03: 1.5, 0.1: 2.0}  # 0.01 on the lower edge: one rate added below
    fits, alive = [], []

    def fake_train(model, start, train, valid, lr, seed, job, label):
        alive.append(sum(f.weight is not None for f in fits))  # copies held while training
        w = torch.full((2, 2), lr)
        fits.append(saffu_train.Fit(lr, losses.get(lr, 3.0), 1, 2, False, False, 0.1, [], w))
        return fits[-1]

    monkeypatch.setattr(saffu_train, "train_adamw", fake_train)
    model = SaffuLM(2, 2)
    job = SaffuJobConfig.from_dict({**CFG, "lrs": [0.01, 0.03, 0.1], "lr_extend": 1}, "saffu")
    data = {"train": None, "valid": None}
    fit, chosen, _, _ = saffu_train.tune_lr(model, torch.zeros(2, 2), data, 0, job, "t")
    assert len(fits) == 4 and chosen.extensions == 1 and chosen.value == 0.01
    assert torch.equal(model.weight.data, torch.full((2, 2), 0.01)) and fit is fits[0]
    assert alive == [0, 1, 1, 1] and [f.lr for f in fits if f.weight is not None] == [0.01]


def test_a_cold_start_whose_heldout_loss_barely_fell_is_untrained_and_its_claims_skipped():
    """Hand-made records: the cold start at 10 % fell 0.5 nats at seed 0 and 0.05 < 0.1 at
    seed 1; the declared warm-against-cold and gain claims are not evaluated, naming seed 1."""
    from pillm.paper.claim_frame import claim_frame
    from pillm.paper.claims import evaluate, load_claims
    from pillm.saffu.aggregate import claim_rows, trained_rows

    rows = []
    for seed, fall in ((0, 0.5), (1, 0.05)):
        for init, start, ppl in (("explicit", 5.0, 90.0), ("random", 6.0, 100.0)):
            end = start - (fall if init == "random" else 0.3)
            for metric, value in (("init_val_loss", start), ("val_loss", end),
                                  ("test_ppl", ppl + seed), ("test_loss", math.log(ppl + seed)),
                                  ("init_test_ppl", 120.0)):  # fmt: skip
                rows.append({"variant": "m", "init": init, "fraction": 0.1, "seed": seed,
                             "metric": metric, "value": value})  # fmt: skip
    runs = pl.DataFrame(rows)
    flags = trained_rows(runs, 0.1).filter(pl.col("metric") == "trained").sort("seed")
    assert flags["value"].to_list() == [1.0, 0.0] and set(flags["init"]) == {"random"}
    runs = pl.concat([runs, trained_rows(runs, 0.1)], how="diagonal_relaxed")
    frame = claim_frame(claim_rows(runs, "m"))
    claims, specs = load_claims([REPO_TEMPLATES.parent / "claims/saffu.yaml"])
    res = {r.id: r for r in evaluate(claims, specs, {"saffu": frame})}
    r = res["saffu_warm_cold_ten"]
    assert r.verdict == "opponent did not train" and r.untrained == "cold_f10: seed 1"
    assert "is not evaluated" in r.sentence
    assert res["saffu_gain_ten_full"].verdict == "not run"  # no full-split runs here
    assert res["saffu_explicit_kn_ten"].verdict == "not run"
