import math
import warnings

import numpy as np
import pytest
import torch

from pillm.core.ridge import (
    GramStats,
    RidgeFallbackWarning,
    accumulate_gram,
    chunk_ranges,
    heldout_sse,
    r2_score_from_stats,
    ridge_path,
    select_lambda,
    solve_relative,
    solve_ridge,
    spectrum,
    split_heldout,
    stream_gram,
)

F64 = torch.float64


def _problem(n=200, p=10, k=3, noise=0.1, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, p, generator=g, dtype=F64)
    w = torch.randn(p, k, generator=g, dtype=F64)
    y = h @ w + noise * torch.randn(n, k, generator=g, dtype=F64)
    return h.to(dtype), y.to(dtype), w


def _stats(h, y):
    s = GramStats.zeros(h.shape[1], y.shape[1])
    s.update(h, y)
    return s


def _assert_stats_close(a: GramStats, b: GramStats, tol=1e-10):
    assert a.n == b.n
    for name in ("hth", "hty", "yty", "h_sum", "y_sum"):
        x, z = getattr(a, name), getattr(b, name)
        assert x.dtype == F64 and z.dtype == F64
        torch.testing.assert_close(x, z, rtol=tol, atol=tol)


def test_lam0_matches_lstsq():
    h, y, _ = _problem()
    sol = solve_ridge(_stats(h, y))
    ref = torch.linalg.lstsq(h, y).solution
    assert sol.solver == "cholesky" and sol.fallback_reason is None
    assert sol.weight.dtype == F64 and sol.weight.shape == (10, 3)
    torch.testing.assert_close(sol.weight, ref, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("lam", [1e-3, 0.5, 10.0])
@pytest.mark.parametrize("kappa_max", [1e10, 1.0])  # 1.0 forces the eigh path
def test_lam_positive_matches_formula_and_numpy(lam, kappa_max):
    h, y, _ = _problem()
    a = h.T @ h + lam * torch.eye(10, dtype=F64)
    ref = torch.linalg.solve(a, h.T @ y)
    ref_np = np.linalg.solve(a.numpy(), h.numpy().T @ y.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeFallbackWarning)
        sol = solve_ridge(h.T @ h, h.T @ y, lam=lam, kappa_max=kappa_max)
    assert sol.solver == ("cholesky" if kappa_max > 1 else "eigh")
    assert sol.lam == lam
    torch.testing.assert_close(sol.weight, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sol.weight.numpy(), ref_np, rtol=1e-9, atol=1e-9)


def test_streaming_chunks_and_merge():
    h, y, _ = _problem(n=101)
    one = _stats(h, y)
    bounds = [0, 1, 9, 10, 33, 60, 61, 101]  # 7 uneven chunks, one of a single row
    chunks = [(h[a:b], y[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert len(chunks) == 7
    _assert_stats_close(accumulate_gram(iter(chunks), 10, 3), one)
    left = accumulate_gram(chunks[:3], 10, 3)
    right = accumulate_gram(chunks[3:], 10, 3)
    _assert_stats_close(left.merge(right), one)
    assert left.n == 10  # merge does not mutate
    empty = accumulate_gram([], 10, 3)
    assert empty.n == 0 and empty.hth.shape == (10, 10)


def test_update_accepts_1d_y_and_rejects_bad_shapes():
    h, y, _ = _problem(k=1)
    s = GramStats.zeros(10, 1)
    s.update(h, y[:, 0])
    _assert_stats_close(s, _stats(h, y))
    with pytest.raises(ValueError):
        s.update(h[:, :5], y)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_float32_inputs_match_float64(lam):
    h, y, _ = _problem()
    s32 = _stats(h.float(), y.float())
    assert s32.hth.dtype == F64
    w32 = solve_ridge(s32, lam=lam).weight
    w64 = solve_ridge(_stats(h, y), lam=lam).weight
    torch.testing.assert_close(w32, w64, rtol=1e-5, atol=1e-5 * w64.abs().max().item())


@pytest.mark.parametrize("case", ["duplicated", "low_rank"])
def test_singular_lam0_falls_back_to_min_norm(case):
    h, y, _ = _problem(n=50, p=8)
    if case == "duplicated":
        h = torch.cat([h, h[:, :3]], dim=1)  # 11 columns, rank 8
    else:
        g = torch.Generator().manual_seed(1)
        h = h[:, :4] @ torch.randn(4, 8, generator=g, dtype=F64)  # rank 4
    with pytest.warns(RidgeFallbackWarning, match="eigh"):
        sol = solve_ridge(_stats(h, y), lam=0.0)
    assert sol.solver == "eigh"
    assert sol.fallback_reason is not None and "kappa" in sol.fallback_reason
    assert sol.kappa > 1e10
    ref = torch.linalg.pinv(h) @ y
    torch.testing.assert_close(sol.weight, ref, rtol=1e-6, atol=1e-6)
    # ridge_path at λ = 0 uses the same cutoff, so it is min-norm too
    torch.testing.assert_close(ridge_path(_stats(h, y), [0.0])[0], ref, rtol=1e-6, atol=1e-6)


def test_cholesky_failure_is_recorded():
    a = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=F64)  # indefinite, kappa = 3
    with pytest.warns(RidgeFallbackWarning, match="cholesky failed"):
        sol = solve_ridge(a, torch.ones(2, 1, dtype=F64))
    assert sol.solver == "eigh" and sol.fallback_reason.startswith("cholesky failed")


@pytest.mark.parametrize("lam", [0.0, 0.1, 100.0])
def test_kappa_matches_cond(lam):
    h, y, _ = _problem()
    h = h * torch.logspace(0, 2, 10, dtype=F64)  # non-trivial conditioning
    sol = solve_ridge(_stats(h, y), lam=lam)
    ref = torch.linalg.cond(h.T @ h + lam * torch.eye(10, dtype=F64)).item()
    assert sol.kappa == pytest.approx(ref, rel=1e-8)


def test_ridge_path_matches_solve_ridge():
    h, y, _ = _problem()
    s = _stats(h, y)
    lams = [0.0, 1e-2, 1.0, 50.0]
    for lam, w in zip(lams, ridge_path(s, lams), strict=True):
        torch.testing.assert_close(w, solve_ridge(s, lam=lam).weight, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kappa_max", [1e10, 10.0])  # Cholesky; the eigh fallback
def test_a_given_spectrum_replaces_the_decompositions(kappa_max):
    """select_lambda hands solve_ridge the eigendecomposition of HᵀH it already made: κ and the
    fallback then come from it (same values as the solver's own decompositions)."""
    h, y, _ = _problem()
    h = h * torch.logspace(0, 2, 10, dtype=F64)
    s = _stats(h, y)
    eig = torch.linalg.eigh((s.hth + s.hth.T) / 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeFallbackWarning)
        own = solve_ridge(s, lam=0.5, kappa_max=kappa_max)
        given = solve_ridge(s, lam=0.5, kappa_max=kappa_max, eig=eig)
    assert given.solver == own.solver == ("eigh" if kappa_max == 10.0 else "cholesky")
    assert given.kappa == pytest.approx(own.kappa, rel=1e-9)
    torch.testing.assert_close(given.weight, own.weight, rtol=1e-9, atol=1e-12)


def test_select_lambda_decomposes_hth_once(monkeypatch):
    """One O(p³) eigendecomposition per selection, whatever the grid (the curve, κ and a
    fallback share it): a second one took about a third of a solve's time."""
    calls = []
    for name in ("eigh", "eigvalsh"):
        real = getattr(torch.linalg, name)
        monkeypatch.setattr(torch.linalg, name,
                            lambda a, _f=real, _n=name: calls.append(_n) or _f(a))  # fmt: skip
    h, y, _ = _problem(n=400, p=30, k=2, noise=3.0, seed=3)
    for kappa_max in (1e10, 1.0):  # Cholesky, then the eigh fallback
        calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RidgeFallbackWarning)
            select_lambda(_stats(h[:40], y[:40]), _stats(h[40:], y[40:]), [1e-3, 1.0, 1e3],
                          kappa_max=kappa_max)  # fmt: skip
        assert calls == ["eigh"]


def test_a_selection_again_on_the_same_statistics_reuses_the_spectrum(monkeypatch):
    """solve_relative on an extended grid (lm.pil.solve_layer's edge extensions) with the
    spectrum passed back in: no new decomposition, the same pick and weights as a fresh one."""
    h, y, _ = _problem(n=400, p=30, k=2, noise=3.0, seed=3)
    tr, va = _stats(h[:40], y[:40]), _stats(h[40:], y[40:])
    grid = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    fresh_w, fresh = solve_relative(tr, va, grid)
    eig = spectrum(tr)
    calls = []
    real = torch.linalg.eigh
    monkeypatch.setattr(torch.linalg, "eigh", lambda a: calls.append(1) or real(a))
    again_w, again = solve_relative(tr, va, grid, eig=eig)
    assert calls == [] and again.lam_rel == fresh.lam_rel and again.curve == fresh.curve
    torch.testing.assert_close(again_w, fresh_w, rtol=0, atol=0)


def test_heldout_sse_matches_direct():
    h, y, _ = _problem()
    w = solve_ridge(_stats(h[:150], y[:150]), lam=0.3).weight
    direct = ((y[150:] - h[150:] @ w) ** 2).sum(0)
    torch.testing.assert_close(heldout_sse(w, _stats(h[150:], y[150:])), direct, rtol=1e-9, atol=0)


def test_select_lambda_picks_interior_best():
    # Few rows, many features and heavy noise: OLS overfits, huge λ underfits.
    h, y, _ = _problem(n=400, p=30, k=2, noise=3.0, seed=3)
    tr, va = _stats(h[:40], y[:40]), _stats(h[40:], y[40:])
    lams = [0.0, 0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 1e3, 1e5]
    sol, curve = select_lambda(tr, va, lams)
    direct = {}
    for lam in lams:
        w = torch.linalg.solve(
            h[:40].T @ h[:40] + lam * torch.eye(30, dtype=F64), h[:40].T @ y[:40]
        )
        direct[lam] = (((y[40:] - h[40:] @ w) ** 2).mean()).item()
    best = min(direct, key=direct.get)
    assert lams[0] < best < lams[-1]
    assert sol.lam == best and sol.solver == "cholesky"
    assert list(curve) == lams
    for lam in lams:
        assert curve[lam] == pytest.approx(direct[lam], rel=1e-8)


def test_solve_relative_scales_the_grid_by_mean_feature_energy():
    h, y, _ = _problem(n=400, p=30, k=2, noise=3.0, seed=3)
    h = 7.0 * h  # a feature scale the relative grid must absorb
    tr, va = _stats(h[:40], y[:40]), _stats(h[40:], y[40:])
    rel = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    weight, fit = solve_relative(tr, va, rel, kappa_max=1e10)
    scale = float(torch.trace(tr.hth)) / 30
    sol, curve = select_lambda(tr, va, [r * scale for r in rel])
    assert torch.equal(weight, sol.weight) and fit.lam == sol.lam
    assert fit.lam_rel == sol.lam / scale and fit.lam_rel in rel
    assert list(fit.curve) == rel and list(fit.curve.values()) == list(curve.values())
    assert fit.heldout_mse == min(fit.curve.values()) == curve[sol.lam]
    assert (fit.n_train, fit.n_val, fit.n_features) == (40, 360, 30)
    assert fit.solver == "cholesky" and fit.fallback is None and fit.kappa == sol.kappa


def test_stream_gram_is_chunk_independent_and_split_heldout_keeps_a_tail():
    h, y, _ = _problem(n=103, p=5, k=2)

    def pairs(a, b):
        return h[a:b], None, y[a:b]

    one = stream_gram(lambda x, t: x, pairs, 103, (5, 2), 1000, torch.device("cpu"))
    many = stream_gram(lambda x, t: x, pairs, 103, (5, 2), 10, torch.device("cpu"))
    _assert_stats_close(one, many)
    assert list(chunk_ranges(5, 2)) == [(0, 2), (2, 4), (4, 5)]
    fit, val = split_heldout(h, 0.1)
    assert fit.shape[0] == 93 and torch.equal(val, h[-10:])
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_heldout(h[:1], 0.5)


def test_r2_matches_direct():
    h, y, _ = _problem(noise=1.0)
    y = y + torch.tensor([5.0, -2.0, 0.0], dtype=F64)  # non-zero means: SST must centre
    w = solve_ridge(_stats(h[:150], y[:150]), lam=1.0).weight
    hv, yv = h[150:], y[150:]
    sse = ((yv - hv @ w) ** 2).sum(0)
    sst = ((yv - yv.mean(0)) ** 2).sum(0)
    r2, per = r2_score_from_stats(w, _stats(hv, yv))
    assert r2 == pytest.approx(1 - (sse.sum() / sst.sum()).item(), rel=1e-10)
    torch.testing.assert_close(per, 1 - sse / sst, rtol=1e-10, atol=1e-12)


def test_r2_exact_linear_is_one():
    h, _, w_true = _problem()
    h = torch.cat([h, torch.ones(200, 1, dtype=F64)], dim=1)  # intercept via ones column
    y = h @ torch.cat([w_true, torch.full((1, 3), 2.0, dtype=F64)])
    w = solve_ridge(_stats(h[:150], y[:150])).weight
    r2, per = r2_score_from_stats(w, _stats(h[150:], y[150:]))
    assert math.isclose(r2, 1.0, abs_tol=1e-10)
    torch.testing.assert_close(per, torch.ones(3, dtype=F64), rtol=0, atol=1e-10)


def test_rejects_negative_lambda():
    h, y, _ = _problem()
    with pytest.raises(ValueError):
        solve_ridge(_stats(h, y), lam=-1.0)


@pytest.mark.bench
def test_selection_benchmark_compares_shared_separate_and_cholesky_selections():
    """benchmarks/ridge_select.py: every way picks the same λ and gives the same weights (the
    Cholesky path up to rounding), and it prints each ratio."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "ridge_select.py"
    out = subprocess.run([sys.executable, str(script), "--size", "60,4", "--repeats", "1"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    header, row = (line.split() for line in out.strip().splitlines()[-2:])
    assert "cholesky" in header and row[:2] == ["60", "4"] and row[-1] == "yes"
    assert row[4].endswith("x") and row[7].endswith("x")
    assert float(row[5]) == 0.0  # separate: the shared spectrum changes no weight
    assert float(row[8]) < 1e-9  # cholesky: the same solution up to rounding
