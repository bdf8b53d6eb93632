import math

import pytest
import torch

from pillm.generative.diffusion import (
    DiffusionConfig,
    EpsModel,
    bucket_edges,
    eps_heldout_mse,
    fit_pil_diffusion,
    linear_beta_schedule,
    sample_ddpm,
    stratified_timesteps,
    train_gradient_diffusion,
)
from pillm.generative.features import FeatureConfig, RandomFeatureNet
from pillm.generative.sample_quality import frechet_distance, nn1_accuracy
from pillm.generative.train import TrainConfig

torch.set_num_threads(1)

MU, S = torch.tensor([1.5, -0.5]), 0.3  # Gaussian toy data N(MU, S² I)


def gaussian_data(n: int, seed: int) -> torch.Tensor:
    return MU + S * torch.randn(n, 2, generator=torch.Generator().manual_seed(seed))


def exact_eps(sched):
    """E[ε | x_t] for Gaussian data: √(1-ᾱ) (x - √ᾱ μ) / (ᾱ s² + 1 - ᾱ)."""
    ab = sched.alpha_bars.float()

    def eps(x, t):
        a = ab[t][:, None]
        return (1 - a).sqrt() * (x - a.sqrt() * MU) / (a * S**2 + 1 - a)

    return eps


def mixture(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    return centers[torch.randint(4, (n,), generator=g)] + 0.3 * torch.randn(n, 2, generator=g)


def test_linear_beta_schedule():
    s = linear_beta_schedule(1000)
    assert s.T == 1000 and s.betas.dtype == torch.float64
    assert math.isclose(float(s.betas[0]), 1e-4) and math.isclose(float(s.betas[-1]), 0.02)
    ab = s.alpha_bars
    assert torch.allclose(ab, torch.cumprod(1 - s.betas, 0))
    assert 1e-5 < float(ab[-1]) < 1e-4  # ≈ exp(-Σβ) ≈ 4e-5: x_T is pure noise
    short = linear_beta_schedule(100)  # β scaled by 1000/T keeps ᾱ_T comparable
    assert math.isclose(float(short.betas[0]), 1e-3) and 1e-5 < float(short.alpha_bars[-1]) < 1e-4
    with pytest.raises(ValueError, match="beta_end"):
        linear_beta_schedule(10)  # 0.02 * 100 >= 1


def test_bucket_edges_and_routing_by_timestep():
    assert bucket_edges(10, 3) == [0, 3, 7, 10]
    assert bucket_edges(5, 5) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="n_buckets"):
        bucket_edges(5, 6)
    net = RandomFeatureNet(2, 1, FeatureConfig(width=3), seed=0, trainable=False)
    model = EpsModel(net, timesteps=10, n_buckets=3)
    for b in range(3):  # bucket b outputs the constant b through the bias row
        model.w_buckets[b, -1, 0] = float(b)
    t = torch.arange(10)
    out = model(torch.randn(10, 2), t)[:, 0]
    assert out.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    # The sampler's one-timestep call (a Python int) routes to the same buckets.
    assert [model(torch.randn(1, 2), i)[0, 0].item() for i in range(10)] == out.tolist()


@pytest.mark.parametrize("n_buckets", [1, 3])
def test_the_samplers_integer_timestep_gives_the_per_row_timesteps_result(n_buckets):
    net = RandomFeatureNet(2, 2, FeatureConfig(width=5), seed=0, trainable=False)
    torch.nn.init.normal_(net.w_out)
    model = EpsModel(net, timesteps=10, n_buckets=n_buckets)
    if model.w_buckets is not None:
        torch.nn.init.normal_(model.w_buckets)
    x = torch.randn(6, 2)
    for t in (0, 4, 9):
        # one map's product against all maps' batched product, then a gather: BLAS may sum the
        # two in another order (they differed in the last bits on an H200 host's CPU)
        torch.testing.assert_close(model(x, t), model(x, torch.full((6,), t)), rtol=1e-6, atol=1e-6)


def test_per_bucket_forward_matches_each_row_through_its_own_map_in_values_and_gradients():
    net = RandomFeatureNet(4, 3, FeatureConfig(width=8), seed=0, trainable=True)
    model = EpsModel(net, timesteps=20, n_buckets=4, trainable=True)
    torch.nn.init.normal_(model.w_buckets)
    x, t = torch.randn(32, 4), torch.randint(20, (32,))
    out = model(x, t)
    h = model.features(x, t)
    ref = torch.stack([h[i] @ model.w_buckets[b] for i, b in enumerate(model.bucket_of(t))])
    torch.testing.assert_close(out, ref)
    weights = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * weights).sum(), model.w_buckets)
    (grad_ref,) = torch.autograd.grad((ref * weights).sum(), model.w_buckets)
    torch.testing.assert_close(grad, grad_ref)
    assert grad[model.bucket_of(t).unique()].abs().sum() > 0


@pytest.mark.parametrize("timesteps", [50, 200])
def test_ddpm_sampling_with_the_exact_eps_recovers_the_data_distribution(timesteps):
    sched = linear_beta_schedule(timesteps)
    x = sample_ddpm(exact_eps(sched), 4000, 2, sched, seed=0)
    assert torch.allclose(x.mean(0), MU, atol=0.03)
    assert torch.allclose(x.std(0), torch.full((2,), S), atol=0.03)
    # The clipped-x̂ form is the same step when nothing is clipped.
    clipped = sample_ddpm(exact_eps(sched), 500, 2, sched, seed=0, clip_x0=100.0)
    torch.testing.assert_close(clipped, x[:500], rtol=1e-4, atol=1e-4)


def test_pil_eps_prediction_reaches_the_bayes_error_on_gaussian_data():
    x = gaussian_data(3000, 0)
    cfg = DiffusionConfig(FeatureConfig(width=256), timesteps=100, pairs_per_image=8)
    model, fits = fit_pil_diffusion(x, cfg, seed=0)
    assert len(fits) == 1 and fits[0].fallback is None
    sched = cfg.schedule()
    bayes = eps_heldout_mse(exact_eps(sched), x[-300:], sched, seed=0, pairs_per_image=8)
    pil = eps_heldout_mse(model, x[-300:], sched, seed=0, pairs_per_image=8)
    assert bayes <= pil < 1.02 * bayes


def test_chunking_does_not_change_per_bucket_weights():
    x = mixture(400, 0)
    kw = dict(features=FeatureConfig(width=32), timesteps=40, n_buckets=2, pairs_per_image=2)
    one, f1 = fit_pil_diffusion(x, DiffusionConfig(**kw, chunk_size=10**6), seed=3)
    many, f2 = fit_pil_diffusion(x, DiffusionConfig(**kw, chunk_size=29), seed=3)
    assert [f.lam_rel for f in f1] == [f.lam_rel for f in f2]
    torch.testing.assert_close(many.w_buckets, one.w_buckets, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(one.w_buckets[0], one.w_buckets[1])


def test_per_bucket_weights_fit_better_than_shared_and_samples_beat_noise():
    x, real = mixture(4000, 0), mixture(1000, 1)
    feats = FeatureConfig(width=256)
    held = x[-400:]
    scores = {}
    for k in (1, 4):
        cfg = DiffusionConfig(feats, timesteps=100, n_buckets=k, pairs_per_image=4)
        model, fits = fit_pil_diffusion(x, cfg, seed=0)
        assert len(fits) == k
        samples = sample_ddpm(model, 1000, 2, cfg.schedule(), seed=1)
        mse = eps_heldout_mse(model, held, cfg.schedule(), seed=0)
        scores[k] = (mse, nn1_accuracy(real, samples)["acc"], frechet_distance(real, samples))
    noise = torch.randn(1000, 2, generator=torch.Generator().manual_seed(5))
    assert scores[4][0] < scores[1][0]  # K weight sets, each fitted on its own t range
    for _, nn1, fd in scores.values():
        assert nn1 < nn1_accuracy(real, noise)["acc"] - 0.1
        assert fd < frechet_distance(real, noise) / 4


def test_gradient_baseline_has_the_shared_shape_and_learns():
    x = gaussian_data(1000, 0)
    cfg = DiffusionConfig(FeatureConfig(width=64), timesteps=50)
    model, report = train_gradient_diffusion(
        x[:900], cfg, TrainConfig(steps=300, batch_size=128, lr=3e-3, warmup=20), seed=0
    )
    assert model.n_buckets == 1 and len(list(model.parameters())) == 4
    assert report.final_loss < report.curve[0][1]
    sched = cfg.schedule()
    held = dict(x_val=x[900:], sched=sched, seed=0, pairs_per_image=8)
    zero = eps_heldout_mse(lambda xt, t: torch.zeros_like(xt), **held)
    bayes = eps_heldout_mse(exact_eps(sched), **held)
    grad = eps_heldout_mse(model, **held)
    assert bayes < grad < 0.5 * zero


def test_per_bucket_adamw_trains_one_map_per_bucket_on_its_rows():
    x = gaussian_data(600, 0)
    cfg = DiffusionConfig(FeatureConfig(width=32), timesteps=40, n_buckets=4)
    model, report = train_gradient_diffusion(
        x, cfg, TrainConfig(steps=60, batch_size=64, lr=3e-3, warmup=5), seed=0
    )
    assert model.n_buckets == 4 and isinstance(model.w_buckets, torch.nn.Parameter)
    assert not model.net.w_out.requires_grad  # the shared map is frozen and unused
    assert torch.count_nonzero(model.net.w_out) == 0
    assert all(torch.count_nonzero(w) > 0 for w in model.w_buckets)  # every bucket trained
    assert report.final_loss < report.curve[0][1]
    # A row's output depends only on its own bucket's map: zeroing bucket 0 leaves bucket 3's.
    xt, t = x[:8], torch.full((8,), 39)
    before = model(xt, t).detach()
    with torch.no_grad():
        model.w_buckets[0].zero_()
    assert torch.equal(model(xt, t).detach(), before)
    # Same parameter count as the bucketed PIL solve's maps, plus the shared random layer.
    pil, _ = fit_pil_diffusion(x, cfg, seed=0)
    pad = model.net.pad  # the trainable net's zero features (alignment), rows never trained
    assert model.w_buckets[:, : model.w_buckets.shape[1] - pad].shape == pil.w_buckets.shape


def test_stratified_timesteps_give_each_bucket_its_rows_uniform_over_its_timesteps():
    edges = bucket_edges(10, 3)  # [0, 3, 7, 10]: widths 3, 4, 3
    draw = stratified_timesteps(edges, 2000, torch.device("cpu"))
    t = draw(torch.Generator().manual_seed(0))
    assert t.shape == (6000,)
    for b in range(3):
        rows = t[b * 2000 : (b + 1) * 2000]
        assert set(rows.tolist()) == set(range(edges[b], edges[b + 1]))  # every step, no other
        counts = torch.bincount(rows - edges[b]).float()
        assert counts.min() > 0.8 * counts.mean()  # near uniform within the bucket


@pytest.mark.parametrize("direct_link", [False, True])
def test_stratified_forward_equals_each_row_through_its_own_map_in_values_and_gradients(
    direct_link,
):
    feats = FeatureConfig(width=8, direct_link=direct_link)
    net = RandomFeatureNet(4, 3, feats, seed=0, trainable=True)
    model = EpsModel(net, timesteps=20, n_buckets=4, trainable=True)
    torch.nn.init.normal_(model.w_buckets)
    t = stratified_timesteps(bucket_edges(20, 4), 5, torch.device("cpu"))(
        torch.Generator().manual_seed(1)
    )
    x = torch.randn(20, 4)
    fast, ref = model.forward_stratified(x, t), model(x, t)
    torch.testing.assert_close(fast, ref)
    weights = torch.randn_like(ref)
    (grad,) = torch.autograd.grad((fast * weights).sum(), model.w_buckets)
    (grad_ref,) = torch.autograd.grad((ref * weights).sum(), model.w_buckets)
    torch.testing.assert_close(grad, grad_ref)


def test_per_bucket_adamw_draws_equal_rows_per_bucket_and_reports_them():
    x = gaussian_data(300, 0)
    cfg = DiffusionConfig(FeatureConfig(width=16), timesteps=40, n_buckets=3)
    _, report = train_gradient_diffusion(
        x, cfg, TrainConfig(steps=5, batch_size=64, lr=1e-3, warmup=1), seed=0
    )
    assert report.batch_rows == 63  # 21 rows in each of the 3 buckets
    with pytest.raises(ValueError, match="batch_size 2 < n_buckets 3"):
        train_gradient_diffusion(x, cfg, TrainConfig(steps=1, batch_size=2, lr=1e-3), seed=0)
