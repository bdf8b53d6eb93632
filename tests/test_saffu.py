"""SAFFU explicit solution: exact optimality on one-hot inputs (against long gradient descent),
translation invariance, the gap on mixed inputs, the context features, one run end to end
(warm vs cold), determinism, and aggregation into the tables and macros."""

import json
import math

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F

from pillm.saffu.figures import saffu_figures
from pillm.saffu.report import aggregate_saffu, render_saffu_tables
from pillm.saffu.run import (
    SaffuLM,
    context_features,
    cooccurrence,
    explicit_solution,
    n_inputs,
    run_saffu,
    type_index,
)

REPO_TEMPLATES = __import__("pathlib").Path(__file__).resolve().parents[1] / "paper/templates"


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


# ---------------------------------------------------------------- one run, end to end

V = 40
CFG = dict(
    top_types=24,
    alphas=[0.1, 1.0],
    init_std=0.02,
    steps=6,
    batch_size=64,
    lr=1e-2,
    betas=[0.9, 0.99],
    weight_decay=0.0,
    warmup_frac=0.0,
    min_lr_frac=0.1,
    eval_every=3,
    eval_chunk=128,
    settings={"cat_b4_r2": dict(agg="cat", block=4, radius=2)},
    main_setting="cat_b4_r2",
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


def _records(path) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def runs(tokens_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("saffu")
    out = {}
    for init in ("explicit", "random"):
        d = root / "cat_b4_r2" / init / "seed0"
        run_saffu("cat_b4_r2", init, 0, CFG, tokens_dir, d, "cpu")
        out[init] = d
    return out


def test_warm_start_beats_cold_at_step_zero_and_both_take_the_same_steps(runs, tokens_dir):
    warm, cold = (_records(runs[k] / "metrics.json") for k in ("explicit", "random"))
    assert warm["init_val_loss"] < cold["init_val_loss"] - 0.5
    assert cold["init_val_loss"] == pytest.approx(math.log(V), abs=0.05)  # N(0, 0.02) ~ uniform
    assert warm["train_steps"] == cold["train_steps"] == CFG["steps"]
    assert warm["alpha"] in CFG["alphas"] and "alpha" not in cold
    assert warm["init_test_ppl"] == pytest.approx(math.exp(warm["init_test_loss"]))
    assert "init_test_ppl" not in cold  # a random start is no model worth a test pass
    for r in (warm, cold):
        assert r["test_ppl"] == pytest.approx(math.exp(r["test_loss"]))
        assert r["test_predicted"] == len(np.load(tokens_dir / "test.npy")) - 1
    curves = {k: pl.read_parquet(d / "curve.parquet") for k, d in runs.items()}
    assert curves["explicit"]["step"].to_list() == curves["random"]["step"].to_list()
    assert curves["explicit"].filter(pl.col("step") == 0)["val_loss"][0] == pytest.approx(
        warm["init_val_loss"]
    )
    recs = json.loads((runs["explicit"] / "metrics.json").read_text())
    assert {r["experiment"] for r in recs} == {"saffu"}
    assert all(r["init"] == "explicit" and r["agg"] == "cat" and "git_rev" in r for r in recs)


def test_same_config_and_seed_give_identical_metrics_on_cpu(runs, tokens_dir, tmp_path):
    run_saffu("cat_b4_r2", "random", 0, CFG, tokens_dir, tmp_path, "cpu")
    a, b = _records(runs["random"] / "metrics.json"), _records(tmp_path / "metrics.json")
    for k in ("test_loss", "val_loss", "init_val_loss", "test_acc"):
        assert a[k] == b[k]


def test_unknown_setting_or_init_names_the_key(tokens_dir, tmp_path):
    with pytest.raises(ValueError, match="saffu.settings"):
        run_saffu("nope", "explicit", 0, CFG, tokens_dir, tmp_path, "cpu")
    with pytest.raises(ValueError, match="init"):
        run_saffu("cat_b4_r2", "zeros", 0, CFG, tokens_dir, tmp_path, "cpu")


def test_aggregation_tables_and_macros_carry_the_run_numbers(runs, tmp_path, capsys):
    metrics = [str(d / "metrics.json") for d in runs.values()]
    curves = [str(d / "curve.parquet") for d in runs.values()]
    params = {"settings": ["cat_b4_r2"], "inits": ["explicit", "random"], "seeds": [0, 1]}
    aggregate_saffu(metrics, curves, params, str(tmp_path))
    assert "missing SAFFU runs" in capsys.readouterr().out  # seed 1 was never run
    summary = pl.read_parquet(tmp_path / "saffu.parquet")
    ppl = summary.filter((pl.col("init") == "random") & (pl.col("metric") == "test_ppl"))
    assert ppl["n"].to_list() == [1] and ppl["n_expected"].to_list() == [2]
    assert pl.read_parquet(tmp_path / "saffu_curves.parquet")["init"].n_unique() == 2
    lm = pl.DataFrame(
        {
            "variant": ["baseline", "baseline"],
            "metric": ["test_ppl", "params_trainable"],
            "mean": [123.45, 2e6],
            "std": [1.0, 0.0],
        }
    )
    lm.write_parquet(tmp_path / "lm.parquet")
    cfg = {k: v for k, v in CFG.items() if k != "settings"}
    cfg.update(main_setting="cat_b4_r2", seeds=[0, 1], inits=["explicit", "random"])
    numbers = tmp_path / "saffu_numbers.tex"
    render_saffu_tables(
        str(tmp_path), str(tmp_path / "lm.parquet"), cfg, str(REPO_TEMPLATES), str(tmp_path),
        str(numbers),
    )  # fmt: skip
    warm = _records(runs["explicit"] / "metrics.json")
    text = numbers.read_text()
    assert f"\\newcommand{{\\SaffuWarmPPL}}{{{warm['test_ppl']:.1f}}}" in text
    assert f"\\newcommand{{\\SaffuExplicitPPL}}{{{warm['init_test_ppl']:.1f}}}" in text
    assert "\\newcommand{\\SaffuBaselinePPL}{123.5}" in text
    assert "\\newcommand{\\SaffuPilPurePPL}{--}" in text  # not in this LM summary
    table = (tmp_path / "saffu.tex").read_text()
    rows = [line for line in table.splitlines() if line.strip().startswith(("GPT", "SAFFU"))]
    assert len(rows) == 4 and "123.5 $\\pm$ 1.0" in rows[0]
    assert f"{warm['test_ppl']:.1f}" in rows[2]
    ablation = (tmp_path / "saffu_ablation.tex").read_text()
    assert "cat\\_b4\\_r2 (main)" in ablation
    saffu_figures(str(tmp_path), "cat_b4_r2", str(tmp_path / "fig"))
    assert {p.name for p in (tmp_path / "fig").iterdir()} == {
        f"saffu_{n}.{ext}" for n in ("curves", "ablation") for ext in ("pdf", "png")
    }
