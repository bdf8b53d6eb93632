import math

import pytest
import torch

from pillm.generative.features import (
    FeatureConfig,
    RandomFeatureNet,
    align_features,
    time_embedding,
)
from pillm.generative.flow import (
    FlowConfig,
    fit_pil_flow,
    flow_heldout_mse,
    integrate_ode,
    sample_flow,
    train_gradient_flow,
)
from pillm.generative.noise import noise_rows
from pillm.generative.sample_quality import frechet_distance, nn1_accuracy
from pillm.generative.train import TrainConfig

torch.set_num_threads(1)

MU, S = torch.tensor([1.0, -0.5]), 0.5  # Gaussian toy data N(MU, S² I)


def gaussian_data(n: int, seed: int) -> torch.Tensor:
    return MU + S * torch.randn(n, 2, generator=torch.Generator().manual_seed(seed))


def gaussian_velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """E[x1 - x0 | x_t] for x0 ~ N(0, I), x1 ~ N(MU, S² I): the exact marginal velocity."""
    t = t[:, None]
    var = (1 - t) ** 2 + t**2 * S**2
    return MU + (t * S**2 - (1 - t)) / var * (x - t * MU)


def mixture(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    return centers[torch.randint(4, (n,), generator=g)] + 0.3 * torch.randn(n, 2, generator=g)


def test_time_embeddings():
    t = torch.tensor([0.0, 0.5])
    emb = time_embedding(t, "sinusoidal", 8, scale=10.0)
    assert emb.shape == (2, 8)
    assert torch.equal(emb[0], torch.tensor([0.0] * 4 + [1.0] * 4))  # sin 0, cos 0
    assert math.isclose(float(emb[1, 0]), math.sin(5.0), rel_tol=1e-6)  # ω_0 = 1
    assert torch.equal(time_embedding(t, "raw", 8), t[:, None])


def test_feature_config_rejects_bad_values_naming_the_choices():
    with pytest.raises(ValueError, match=r"activation 'swish' unknown; choose from \['gelu'"):
        FeatureConfig(activation="swish")
    with pytest.raises(ValueError, match="time_encoding 'learned' unknown"):
        FeatureConfig(time_encoding="learned")


def test_bi_pil_direct_link_and_bias_columns():
    x, t = torch.randn(5, 3), torch.rand(5)
    single = RandomFeatureNet(3, 3, FeatureConfig(width=4), seed=0, trainable=False)
    bi = RandomFeatureNet(3, 3, FeatureConfig(width=4, n_proj=2), seed=0, trainable=False)
    link = RandomFeatureNet(3, 3, FeatureConfig(width=4, direct_link=True), 0, trainable=False)
    h1, h2, h3 = single.features(x, t), bi.features(x, t), link.features(x, t)
    assert h1.shape == (5, 5) and h2.shape == (5, 9) and h3.shape == (5, 8)
    assert not torch.allclose(h2[:, 4:8], h2[:, :4])  # two different projections
    assert torch.equal(h3[:, 4:7], x) and (h3[:, -1] == 1).all() and (h1[:, -1] == 1).all()


def test_pil_net_and_its_gradient_twin_start_identical():
    cfg = FeatureConfig(width=16, n_proj=2)
    pil = RandomFeatureNet(4, 4, cfg, seed=7, trainable=False)
    grad = RandomFeatureNet(4, 4, cfg, seed=7, trainable=True)
    assert list(pil.parameters()) == [] and len(list(grad.parameters())) == 4
    x, t = torch.randn(6, 4), torch.rand(6)
    h = grad.features(x, t)  # the trainable twin pads H with zero features (alignment)
    assert grad.pad == 3 and h.shape[1] == pil.n_features + 3 == grad.n_features + 3
    assert torch.equal(pil.features(x, t), h[:, :-3]) and not h[:, -3:].any()


CUDA = pytest.mark.gpu


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("model", ["flow", "bucketed"])
def test_alignment_padding_trains_the_unpadded_net(monkeypatch, model, device):
    """A trainable net's zero features (features.ALIGN) change neither the loss curve nor the
    trained weights, their W_out rows stay exactly zero (on CUDA: fused AdamW replayed from a
    CUDA graph) and trainable_params does not count them."""
    from pillm.generative import features
    from pillm.generative.diffusion import DiffusionConfig, train_gradient_diffusion

    x = mixture(400, 0)
    feats = FeatureConfig(width=29, direct_link=True)  # p = 29 + 2 + 1 = 32: pad to 36 below
    cfg = TrainConfig(steps=40, batch_size=40, lr=3e-3, warmup=5)

    def train(align):
        monkeypatch.setattr(features, "ALIGN", align)
        if model == "flow":
            net, rep = train_gradient_flow(x, feats, cfg, seed=0, device=device)
            return net, rep, net.w_out
        dcfg = DiffusionConfig(feats, timesteps=40, n_buckets=4)
        net, rep = train_gradient_diffusion(x, dcfg, cfg, seed=0, device=device)
        return net, rep, net.w_buckets

    plain, plain_rep, plain_w = train(1)
    padded, padded_rep, padded_w = train(12)
    pad = 4
    assert padded_w.shape[-2] == plain_w.shape[-2] + pad
    assert not padded_w[..., -pad:, :].any()  # AdamW never moved the zero rows
    # CUDA: the padded product runs other GEMM kernels (another summation order), and AdamW's
    # normalised step turns the rounding of near-zero gradients into steps of up to lr
    tol = dict(rtol=1e-5, atol=1e-6) if device == "cpu" else dict(rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(padded_w[..., :-pad, :].cpu(), plain_w.cpu(), **tol)
    curves = [[loss for _, loss in r.curve] for r in (plain_rep, padded_rep)]
    assert curves[0] == pytest.approx(curves[1], rel=1e-5 if device == "cpu" else 1e-4)
    assert (
        features.trainable_params(padded)
        == features.trainable_params(plain)
        == sum(p.numel() for p in plain.parameters() if p.requires_grad)
    )


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("model", ["flow", "bucketed"])
def test_aligned_solved_net_samples_what_the_unpadded_one_does(model, device):
    """align_features pads a solved net's features (and each bucket's map) with zeros to a
    multiple of features.ALIGN: the samples are the same up to summation order, a padded net is left
    as it is, and the solve's feature count holds."""
    from pillm.generative.diffusion import DiffusionConfig, fit_pil_diffusion, sample_ddpm

    x = mixture(600, 0)
    feats = FeatureConfig(width=30, direct_link=True)  # p = 33: 3 zero features to 36
    if model == "flow":
        net, _ = fit_pil_flow(x, FlowConfig(feats, pairs_per_image=2), seed=0, device=device)
        draw = lambda m: sample_flow(m, 300, 2, 8, "heun", 0, device)  # noqa: E731
    else:
        dcfg = DiffusionConfig(feats, timesteps=40, n_buckets=4)
        net, _ = fit_pil_diffusion(x, dcfg, seed=0, device=device)
        draw = lambda m: sample_ddpm(m, 300, 2, dcfg.schedule(), 0, device)  # noqa: E731
    before = draw(net)
    weights = [t.clone() for t in net.buffers() if t is not None and t.dim() >= 2]
    assert align_features(net) is net
    rfn = net if model == "flow" else net.net
    assert (rfn.n_features, rfn.pad, rfn.w_out.shape[0]) == (33, 3, 36)
    if model == "bucketed":
        assert net.w_buckets.shape == (4, 36, 2) and not net.w_buckets[:, -3:].any()
    after = draw(net)
    tol = dict(rtol=1e-5, atol=1e-6) if device == "cpu" else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(after, before, **tol)
    align_features(net)  # already aligned: nothing changes
    assert rfn.w_out.shape[0] == 36
    kept = [t for t in net.buffers() if t is not None and t.dim() >= 2]
    for old, new in zip(weights, kept, strict=True):  # a padded map: its solved rows, then zeros
        assert torch.equal(new[..., : old.shape[-2], :] if old.shape != new.shape else new, old)


def test_noise_stream_does_not_depend_on_chunking():
    whole_x, whole_u = noise_rows(3, 0, 0, 2500, 2, "cpu")
    parts = [noise_rows(3, 0, a, b, 2, "cpu") for a, b in ((0, 7), (7, 1500), (1500, 2500))]
    assert torch.equal(torch.cat([p[0] for p in parts]), whole_x)
    assert torch.equal(torch.cat([p[1] for p in parts]), whole_u)
    assert not torch.equal(noise_rows(3, 1, 0, 10, 2, "cpu")[0], whole_x[:10])  # other stream


def test_chunked_gram_gives_the_weights_of_one_chunk():
    x = mixture(600, 0)
    base = FlowConfig(FeatureConfig(width=64), pairs_per_image=3)
    one, fit_one = fit_pil_flow(x, FlowConfig(**{**base.__dict__, "chunk_size": 10**6}), seed=1)
    many, fit_many = fit_pil_flow(x, FlowConfig(**{**base.__dict__, "chunk_size": 37}), seed=1)
    assert fit_one.n_train == fit_many.n_train == 3 * 540
    assert fit_one.lam_rel == fit_many.lam_rel
    torch.testing.assert_close(many.w_out, one.w_out, rtol=1e-5, atol=1e-6)


def test_fit_is_deterministic_given_the_seed():
    x = mixture(300, 0)
    cfg = FlowConfig(FeatureConfig(width=32))
    a, _ = fit_pil_flow(x, cfg, seed=0)
    b, _ = fit_pil_flow(x, cfg, seed=0)
    c, _ = fit_pil_flow(x, cfg, seed=1)
    assert torch.equal(a.w_out, b.w_out) and not torch.equal(a.w_out, c.w_out)


def test_pil_velocity_matches_the_exact_gaussian_velocity():
    x = gaussian_data(3000, 0)
    net, fit = fit_pil_flow(x, FlowConfig(FeatureConfig(width=256), pairs_per_image=8), seed=0)
    g = torch.Generator().manual_seed(1)
    t = 0.05 + 0.9 * torch.rand(2000, generator=g)
    x1 = MU + S * torch.randn(2000, 2, generator=g)
    xt = (1 - t[:, None]) * torch.randn(2000, 2, generator=g) + t[:, None] * x1
    v_true, v_pil = gaussian_velocity(xt, t), net(xt, t)
    rel = ((v_pil - v_true).pow(2).mean() / v_true.pow(2).mean()).sqrt()
    assert rel < 0.12
    # Held-out MSE is within 2% of the Bayes error of the same held-out pairs.
    bayes = flow_heldout_mse(gaussian_velocity, x[-300:], seed=0, pairs_per_image=8)
    assert bayes <= fit.heldout_mse < 1.02 * bayes
    assert fit.solver == "cholesky" and fit.fallback is None


def test_heldout_mse_is_the_one_lambda_was_selected_on():
    x = mixture(500, 0)
    net, fit = fit_pil_flow(x, FlowConfig(FeatureConfig(width=32), pairs_per_image=2), seed=4)
    mse = flow_heldout_mse(net, x[-50:], seed=4, pairs_per_image=2)
    assert math.isclose(mse, fit.heldout_mse, rel_tol=1e-4)
    assert fit.heldout_mse == min(fit.curve.values())


def test_heun_is_second_order_and_beats_euler_at_few_steps():
    x0 = torch.randn(500, 2, generator=torch.Generator().manual_seed(0))
    exact = MU + S * x0  # the exact flow map of the Gaussian path

    def err(method, steps):
        return float((integrate_ode(gaussian_velocity, x0, steps, method) - exact).abs().max())

    assert err("heun", 4) < err("euler", 4) / 5
    assert 1.6 < err("euler", 8) / err("euler", 16) < 2.5  # first order
    assert 3.0 < err("heun", 8) / err("heun", 16) < 5.0  # second order
    with pytest.raises(ValueError, match="choose from"):
        integrate_ode(gaussian_velocity, x0, 4, "rk45")


def test_pil_flow_samples_are_much_closer_to_a_mixture_than_the_noise_is():
    x, real = mixture(4000, 0), mixture(1000, 1)
    net, _ = fit_pil_flow(x, FlowConfig(FeatureConfig(width=512), pairs_per_image=4), seed=0)
    samples = sample_flow(net, 1000, 2, steps=20, method="heun", seed=1)
    noise = torch.randn(1000, 2, generator=torch.Generator().manual_seed(5))
    acc_flow, acc_noise = nn1_accuracy(real, samples)["acc"], nn1_accuracy(real, noise)["acc"]
    assert acc_noise > 0.8 and acc_flow < 0.62
    assert frechet_distance(real, samples) < frechet_distance(real, noise) / 10


def test_gradient_baseline_trains_the_same_network():
    x = mixture(1000, 0)
    feats = FeatureConfig(width=64)
    net, report = train_gradient_flow(
        x[:900], feats, TrainConfig(steps=300, batch_size=128, lr=3e-3, warmup=20), seed=0
    )
    assert report.steps == 300 and report.curve[-1][0] == 300 and report.seconds > 0
    assert report.final_loss < report.curve[0][1]
    zero = flow_heldout_mse(lambda xt, t: torch.zeros_like(xt), x[900:], seed=0)
    assert flow_heldout_mse(net, x[900:], seed=0) < 0.75 * zero  # PIL: ~0.65
    pil = RandomFeatureNet(2, 2, feats, seed=0, trainable=False)
    assert not torch.equal(net.w_x, pil.w_x)  # the first layer was trained too


def test_heldout_curve_is_recorded_on_schedule_with_the_clock_stopped(monkeypatch):
    """A fake clock ticking 1 s per reading; each evaluation advances it 100 s more. The curve's
    seconds and the report's total exclude those 100 s: evaluation is not training time."""
    import pillm.generative.train as train

    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    def evaluate(net) -> float:
        assert not net.training  # evaluated in eval mode, trained in train mode
        now[0] += 100.0
        return float(len(curve_steps))

    curve_steps: list[int] = []
    monkeypatch.setattr(train.time, "perf_counter", clock)
    x = mixture(200, 0)
    cfg = TrainConfig(steps=10, batch_size=16, lr=1e-3, warmup=1, log_every=5)
    _, rep = train_gradient_flow(x, FeatureConfig(width=8), cfg, 0, "cpu", evaluate, eval_every=4)
    assert [s for s, _, _ in rep.heldout] == [4, 8, 10]  # every 4 steps and the last
    secs = [t for _, t, _ in rep.heldout]
    assert secs == sorted(secs) and all(t < 100 for t in secs) and rep.seconds < 100
    # Without evaluate nothing is recorded and no evaluation time exists to subtract.
    _, plain = train_gradient_flow(x, FeatureConfig(width=8), cfg, 0, "cpu")
    assert plain.heldout == []
