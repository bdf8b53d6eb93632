"""AdamW on the output layer alone over the PIL fit's features and pairs (adamw_out.py), and the
convergence rules every gradient arm's record applies (convergence.py), on toy data."""

from __future__ import annotations

import math

import pytest
import torch

from pillm.core.ridge import stream_gram
from pillm.generative.adamw_out import (
    AdamwOutConfig,
    cache_rows,
    fit_adamw_out,
    pick_rate,
    solve_problem,
    train_output_layer,
    train_output_layers,
)
from pillm.generative.convergence import flattened, rel_gain, trained
from pillm.generative.diffusion import DiffusionConfig, eps_heldout_mse, fit_pil_diffusion
from pillm.generative.features import FeatureConfig
from pillm.generative.flow import FlowConfig, fit_pil_flow, flow_heldout_mse, flow_pairs

torch.set_num_threads(1)
CPU = torch.device("cpu")


def mixture(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    return centers[torch.randint(4, (n,), generator=g)] + 0.3 * torch.randn(n, 2, generator=g)


def config(**over) -> AdamwOutConfig:
    base = dict(lr_grid=(1e-3, 1e-2), lr_extend=0, max_epochs=60, batch_size=64, warmup=5,
                flat_evals=3, flat_tol=0.002, trained_drop=0.1)  # fmt: skip
    return AdamwOutConfig(**{**base, **over})


# ---- the rules --------------------------------------------------------------------------------


def test_rel_gain_is_the_best_errors_improvement_over_the_last_evaluations():
    assert rel_gain([1.0, 0.8], 2) is None  # too few evaluations to tell
    assert rel_gain([1.0, 0.8, 0.6], 2) == pytest.approx(0.4)  # best 1.0 -> 0.6
    assert rel_gain([1.0, 0.5, 0.9, 0.7], 2) == pytest.approx(0.0)  # 0.5 not beaten since
    assert rel_gain([math.nan, 1.0], 1) == math.inf  # earlier diverged, later finite
    assert rel_gain([math.nan, math.nan], 1) == 0.0
    assert flattened([1.0, 0.5, 0.499, 0.4985], 2, 0.01) and not flattened([1.0, 0.5], 2, 0.01)
    assert not flattened([1.0, 0.9, 0.8], 1, 0.01)
    with pytest.raises(ValueError, match="generative.gradient.flat_evals"):
        rel_gain([1.0], 0)


def test_trained_needs_the_declared_relative_drop():
    assert trained(2.0, 1.8, 0.1) and not trained(2.0, 1.81, 0.1)
    assert not trained(2.0, math.nan, 0.1) and not trained(math.nan, 1.0, 0.1)


# ---- the cached rows ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["flow", "diffusion"])
def test_cached_rows_are_the_pairs_the_solve_streams(model):
    """At the solve's chunk size the cache holds the solve's rows bit for bit (same random layer,
    same noise streams, bucket by bucket for diffusion), so Hᵀ H and Hᵀ Y are its Gram
    statistics up to float64 summation order."""
    x = mixture(120, 0)
    feats = FeatureConfig(width=16)
    cfg = (FlowConfig(feats, pairs_per_image=2, chunk_size=50) if model == "flow"
           else DiffusionConfig(feats, timesteps=60, n_buckets=2, chunk_size=50))  # fmt: skip
    _, features, pairs, n = solve_problem(cfg, x, seed=3, device=CPU)
    h, y = cache_rows(features, pairs, n, cfg.chunk_size, CPU)
    assert h.shape[:2] == (len(pairs), n) and y.shape == (len(pairs), n, 2)
    for k, rows in enumerate(pairs):
        xt, t, target = rows(50, 100)
        assert torch.equal(h[k, 50:100], features(xt, t)) and torch.equal(y[k, 50:100], target)
        gram = stream_gram(features, rows, n, (h.shape[2], y.shape[2]), cfg.chunk_size, CPU)
        hk, yk = h[k].double(), y[k].double()
        torch.testing.assert_close(hk.T @ hk, gram.hth, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(hk.T @ yk, gram.hty, rtol=1e-12, atol=1e-12)
    if model == "flow":  # the rows are flow_pairs of stream 0, the solve's
        torch.testing.assert_close(y[0, :5], flow_pairs(x, 0, 5, 3, 0, CPU)[2])


# ---- training ----------------------------------------------------------------------------------


def test_training_stops_when_the_heldout_curve_flattens_and_keeps_the_best_pass():
    """A scripted held-out curve: it improves, then moves by less than flat_tol over flat_evals
    passes, so training stops there; the kept weights are those of the lowest error."""
    h = torch.randn(1, 200, 8, generator=torch.Generator().manual_seed(0))
    y = h @ torch.randn(1, 8, 3, generator=torch.Generator().manual_seed(1))
    script = iter([1.0, 0.5, 0.3, 0.2999, 0.3001, 0.3, 0.2, 0.1])
    seen = []

    def evaluate(w):
        seen.append(w.clone())
        return next(script)

    run = train_output_layer(h, y, 1e-2, config(flat_evals=3, flat_tol=0.01), 0, CPU, evaluate)
    assert [c["epoch"] for c in run.curve] == [1, 2, 3, 4, 5, 6]  # 0.3 not beaten by 1 % since 3
    assert run.best_epoch == 4 and not run.capped and run.best == 0.2999
    torch.testing.assert_close(run.weight, seen[3])
    assert run.curve[-1]["step"] == 6 * math.ceil(200 / 64) and run.seconds > 0
    capped = train_output_layer(h, y, 1e-2, config(max_epochs=2), 0, CPU,
                                lambda w: float(1 / (1 + len(seen))))  # fmt: skip
    assert capped.capped and len(capped.curve) == 2
    # A flat curve before the training loss fell by trained_drop is a slow start, not an end.
    slow = train_output_layer(h, y, 1e-7, config(max_epochs=8, flat_evals=2), 0, CPU,
                              lambda w: 1.0)  # fmt: skip
    assert slow.capped and len(slow.curve) == 8
    assert not trained(slow.first_loss, slow.best_train_loss, 0.1)


def test_a_flat_curve_anneals_the_rate_then_stops():
    """Once the curve has flattened (pass 5 here) the rate falls by cosine from where the schedule
    stood to a tenth of the peak over anneal_epochs passes, then the run stops; max_epochs caps
    the passes, annealing included; the kept weights are still the lowest error's."""
    h = torch.randn(1, 200, 8, generator=torch.Generator().manual_seed(0))
    y = h @ torch.randn(1, 8, 3, generator=torch.Generator().manual_seed(1))
    curve = [1.0, 0.5, 0.3, 0.2999, 0.2998, 0.29, 0.28, 0.27, 0.26, 0.25, 0.24]
    flat = dict(flat_evals=2, flat_tol=0.01)

    def train(**over):
        script = iter(curve)
        return train_output_layer(h, y, 1e-2, config(**flat, **over), 0, CPU,
                                  lambda w: next(script))  # fmt: skip

    run = train(anneal_epochs=4)
    assert run.anneal_from == 5 and [c["epoch"] for c in run.curve] == list(range(1, 10))
    assert run.best_epoch == 9 and run.best == 0.26 and not run.capped
    rates = [c["lr"] for c in run.curve]  # each pass's last step's rate
    assert rates[4] > 0.9e-2  # the schedule still near its peak where the curve flattened
    assert all(a > b for a, b in zip(rates[4:], rates[5:], strict=False))  # then it falls
    assert rates[-1] == pytest.approx(1e-3)  # to a tenth of the peak at the anneal's last step
    capped = train(anneal_epochs=4, max_epochs=7)
    assert capped.capped and capped.anneal_from == 5 and len(capped.curve) == 7
    at_once = train()  # anneal_epochs 0: the run stops where the curve flattened
    assert at_once.anneal_from == 0 and len(at_once.curve) == 5
    curve[4] = math.nan  # a pass that diverges where the curve would count as flat: it stops
    diverged = train(anneal_epochs=4)
    assert diverged.anneal_from == 0 and len(diverged.curve) == 5


def test_output_layer_adamw_approaches_the_ridge_solve_on_the_same_pairs():
    """Flow matching on a 2-D mixture: AdamW on W_out alone, from zero, reaches the held-out error
    of the closed form on the same features and pairs within a few percent, trains by the rule,
    and records that it saw the solve's pairs and no others."""
    x, x_val = mixture(900, 0), mixture(100, 1)
    feats = FeatureConfig(width=64)
    fcfg = FlowConfig(feats, pairs_per_image=4, chunk_size=512)
    pil, fit = fit_pil_flow(x, fcfg, seed=0, x_val=x_val)
    pil_mse = flow_heldout_mse(pil, x_val, seed=0, pairs_per_image=4)

    def evaluate(model):
        return flow_heldout_mse(model, x_val, seed=0, pairs_per_image=4)

    net, m, curve = fit_adamw_out(fcfg, config(lr_grid=(3e-3, 1e-2, 3e-2)), x, 0, "cpu", evaluate)
    mse = evaluate(net)
    assert mse == pytest.approx(min(r["y"] for r in curve if r["curve"] == "adamw_out_heldout"))
    assert pil_mse <= mse < 1.05 * pil_mse
    assert m["train_pairs"] == fit.n_train == 4 * 900
    assert m["pair_visits"] == m["epochs_run"] * m["train_pairs"]
    assert m["trained"] == 1.0 and m["first_train_loss"] > m["final_train_loss"]
    assert m["flattened"] == 1.0 and m["capped"] == 0.0 and m["n_lrs"] == 3
    assert m["heldout_mse_pass1"] >= mse and m["trainable_params"] == fit.n_features * 2
    assert {r["lr"] for r in curve if r["curve"] == "adamw_out_grid"} == {3e-3, 1e-2, 3e-2}
    # A later seed given the pick trains that rate alone: here from the same seed, so it is the
    # grid's run of that rate (the grid's rates trained in lockstep, one wider product).
    again, m1, curve1 = fit_adamw_out(fcfg, config(lr_grid=(3e-3, 1e-2, 3e-2)), x, 0, "cpu",
                                      evaluate, lr=m["adamw_lr"])  # fmt: skip
    torch.testing.assert_close(again.w_out, net.w_out, rtol=1e-4, atol=1e-6)
    assert m1["n_lrs"] == 1.0 and m1["epochs_run"] == m["epochs_run"]
    assert m1["lr_chosen_here"] == 0.0 and m["lr_chosen_here"] == 1.0
    assert {r["lr"] for r in curve1 if r["curve"] == "adamw_out_grid"} == {m["adamw_lr"]}


def test_bucketed_output_layer_trains_one_map_per_bucket():
    x, x_val = mixture(300, 0), mixture(60, 1)
    dcfg = DiffusionConfig(FeatureConfig(width=32), timesteps=60, n_buckets=2, chunk_size=256)
    sched = dcfg.schedule()
    pil, fits = fit_pil_diffusion(x, dcfg, seed=0, x_val=x_val)

    def evaluate(model):
        return eps_heldout_mse(model, x_val, sched, seed=0)

    model, m, _ = fit_adamw_out(dcfg, config(lr_grid=(1e-2,)), x, 0, "cpu", evaluate)
    assert model.w_buckets.shape == pil.w_buckets.shape
    assert not torch.equal(model.w_buckets[0], model.w_buckets[1])
    assert m["train_pairs"] == sum(f.n_train for f in fits) == 2 * 300
    assert m["batch_rows"] == 2 * 64 and evaluate(model) < evaluate(lambda xt, t: xt * 0) * 0.9


def test_pick_rate_skips_diverged_rates_and_names_the_key_when_all_did():
    from types import SimpleNamespace as NS

    runs = {1e-3: NS(best=0.5), 1e-2: NS(best=math.inf), 3e-3: NS(best=0.5)}
    assert pick_rate(runs) == 1e-3  # a tie goes to the smaller rate
    with pytest.raises(ValueError, match="generative.adamw_out.lr_grid"):
        pick_rate({1e-2: NS(best=math.inf)})


def test_a_later_seed_reads_only_its_first_seeds_pick(tmp_path):
    import json

    from pillm.generative.fit import read_lr
    from pillm.generative.plan import Setting

    setting = Setting("flow_adamw_out", "flow", "adamw_out", "main", "adamw_out", {})
    row = {"variant": "flow_adamw_out", "seed": 0}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps([{**row, "metric": "adamw_lr", "value": 3e-4},
                                {**row, "metric": "lr_chosen_here", "value": 1.0}]))  # fmt: skip
    assert read_lr(str(path), setting) == 3e-4
    assert read_lr(None, setting) is None  # the first seed picks its own
    path.write_text(json.dumps([{**row, "metric": "adamw_lr", "value": 3e-4},
                                {**row, "metric": "lr_chosen_here", "value": 0.0}]))  # fmt: skip
    with pytest.raises(ValueError, match="chose its rate on the grid"):
        read_lr(str(path), setting)  # a run that reused a rate is no pick
    other = Setting("diff_adamw_out", "diffusion", "adamw_out", "main", "adamw_out", {})
    with pytest.raises(ValueError, match="diff_adamw_out"):
        read_lr(str(path), other)


def test_rates_in_lockstep_train_as_each_would_alone():
    """A grid trained in lockstep (one batch, one wider product, per-rate AdamW state and stop)
    gives each rate the run it has alone on the same shuffles, bucketed maps included."""
    x = mixture(300, 0)
    dcfg = DiffusionConfig(FeatureConfig(width=32), timesteps=60, n_buckets=2, chunk_size=256)
    _, features, pairs, n = solve_problem(dcfg, x, 0, CPU)
    h, y = cache_rows(features, pairs, n, 256, CPU)
    gen = torch.Generator().manual_seed(1)
    probe = torch.randn(h.shape[0], h.shape[2], y.shape[2], generator=gen)

    def evaluate(w):  # a fixed quadratic of W, as a held-out error is
        return float((w - probe).pow(2).mean())

    cfg = config(max_epochs=12, flat_evals=2, flat_tol=0.01)
    together = train_output_layers(h, y, [1e-3, 3e-2, 3.0], cfg, 0, CPU, evaluate)
    for lr, run in together.items():
        alone = train_output_layer(h, y, lr, cfg, 0, CPU, evaluate)
        assert [c["epoch"] for c in run.curve] == [c["epoch"] for c in alone.curve]
        assert run.capped == alone.capped and run.best_epoch == alone.best_epoch
        torch.testing.assert_close(run.weight, alone.weight, rtol=1e-4, atol=1e-6)
        assert run.first_loss == pytest.approx(alone.first_loss, rel=1e-5)
    lengths = {len(r.curve) for r in together.values()}
    assert len(lengths) > 1  # the rates stopped at different passes: each had its own stop


@pytest.mark.bench
def test_anneal_benchmark_reports_each_setting_and_the_grid(tmp_path):
    """benchmarks/adamw_out_anneal.py --tiny: a row per anneal setting with the pick, its gap to
    the closed form and every grid rate's passes; the annealed run stops anneal_epochs passes
    after its curve flattened."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "anneal.json"
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/adamw_out_anneal.py", "--tiny", "--anneal", "0",
           "--anneal", "3", "--threads", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain, annealed = json.loads(out.read_text())
    assert (plain["anneal_epochs"], annealed["anneal_epochs"]) == (0, 3)
    assert plain["anneal_from"] == 0 and annealed["anneal_from"] > 0
    assert annealed["passes"] == annealed["anneal_from"] + 3
    assert set(plain["grid"]) == set(annealed["grid"]) == {"0.01", "0.03"}
    assert all(r["best"] >= r["pil"] * 0.9 and r["gap_percent"] == pytest.approx(
        100 * (r["best"] - r["pil"]) / r["pil"]) for r in (plain, annealed))  # fmt: skip


def test_the_output_layer_arm_counts_as_flat_where_its_anneal_started():
    """Its anneal starts once the curve has flattened and its gains read as not flat at the
    end, so the flag is the anneal's start; a capped run (no anneal) is not flat. The
    full-network arm keeps the flag its record holds."""
    import polars as pl

    from pillm.generative.opponents import seeds_with

    runs = pl.DataFrame({
        "dataset": "mnist", "setting": ["flow_adamw_out"] * 3 + ["flow_adamw"] * 3,
        "flattened": [0.0, 0.0, 1.0, 1.0, 0.0, 1.0],
        "anneal_from_epoch": [12.0, 0.0, 30.0, None, None, None],
    })  # fmt: skip
    assert seeds_with(runs, "mnist", "flow_adamw_out", "flattened") == "2/3"
    assert seeds_with(runs, "mnist", "flow_adamw", "flattened") == "2/3"
    assert seeds_with(runs, "mnist", "flow_adamw_out", "trained") == "--"
