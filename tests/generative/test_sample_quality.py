import math

import pytest
import torch

from pillm.data.images import load_images
from pillm.generative.sample_quality import (
    FeatureCNN,
    extract_features,
    fd_self,
    frechet_distance,
    frechet_distance_gaussian,
    kid,
    mmd2_unbiased,
    nn1_accuracy,
    sample_quality,
    train_feature_classifier,
)

torch.set_num_threads(1)


def gaussian(n, mean, cov, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, len(mean), generator=g, dtype=torch.float64)
    return torch.as_tensor(mean, dtype=torch.float64) + z @ torch.linalg.cholesky(cov).T


def random_rotation(d, seed):
    q, _ = torch.linalg.qr(
        torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    )
    return q


def test_frechet_distance_of_commuting_gaussians_is_the_closed_form():
    # Σ1 = Q diag(a) Qᵀ, Σ2 = Q diag(b) Qᵀ: FD = ‖Δμ‖² + Σ (√a - √b)².
    q = random_rotation(5, 0)
    a, b = torch.tensor([1.0, 2.0, 0.5, 3.0, 0.1]), torch.tensor([4.0, 1.0, 0.5, 0.3, 2.0])
    a, b = a.double(), b.double()
    mu1, mu2 = torch.zeros(5, dtype=torch.float64), torch.full((5,), 0.5, dtype=torch.float64)
    fd = frechet_distance_gaussian(mu1, q @ torch.diag(a) @ q.T, mu2, q @ torch.diag(b) @ q.T)
    expected = 5 * 0.25 + float(((a.sqrt() - b.sqrt()) ** 2).sum())
    assert math.isclose(fd, expected, rel_tol=1e-10)


def test_frechet_distance_matches_scipy_sqrtm_on_non_commuting_covariances():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    g = torch.Generator().manual_seed(1)
    m1, m2 = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    c1, c2 = (m1 @ m1.T + 0.1 * torch.eye(4)).double(), (m2 @ m2.T + 0.1 * torch.eye(4)).double()
    mu = torch.zeros(4, dtype=torch.float64)
    covmean = scipy_linalg.sqrtm((c1 @ c2).numpy()).real
    expected = float(torch.trace(c1) + torch.trace(c2) - 2 * float(covmean.trace()))
    assert math.isclose(frechet_distance_gaussian(mu, c1, mu, c2), expected, rel_tol=1e-8)


def test_sample_frechet_distance_is_zero_on_itself_and_converges_to_the_gaussian_value():
    cov = torch.diag(torch.tensor([1.0, 4.0, 0.25], dtype=torch.float64))
    a = gaussian(20000, [0.0, 0.0, 0.0], cov, 0)
    assert abs(frechet_distance(a, a)) < 1e-9
    assert fd_self(a, a) == frechet_distance(a, a)
    b = gaussian(20000, [1.0, 0.0, 0.0], 4 * cov, 1)  # FD = 1 + Σ(2σ - σ)² = 1 + 5.25
    assert math.isclose(frechet_distance(a, b), 6.25, rel_tol=0.03)


def test_mmd2_unbiased_matches_a_brute_force_sum():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 3, generator=g).double(), torch.randn(4, 3, generator=g).double() + 1

    def k(x, y):
        return (float(x @ y) / 3 + 1) ** 3

    aa = sum(k(a[i], a[j]) for i in range(5) for j in range(5) if i != j) / 20
    bb = sum(k(b[i], b[j]) for i in range(4) for j in range(4) if i != j) / 12
    ab = sum(k(a[i], b[j]) for i in range(5) for j in range(4)) / 20
    assert math.isclose(mmd2_unbiased(a, b), aa + bb - 2 * ab, rel_tol=1e-12)


def test_kid_is_unbiased_near_zero_for_one_distribution_and_positive_for_two():
    eye = torch.eye(8, dtype=torch.float64)
    a, b = gaussian(2000, [0.0] * 8, eye, 0), gaussian(2000, [0.0] * 8, eye, 1)
    # Small subsets (m = 20): the V-statistic (diagonals kept) is biased up by O(1/m).
    mean, std = kid(a, b, subsets=200, subset_size=20, seed=0)
    assert abs(mean) < 3 * std / math.sqrt(200)

    def v_stat(x, y):
        def k(p, q):
            return (p @ q.T / 8 + 1) ** 3

        return float(k(x, x).mean() + k(y, y).mean() - 2 * k(x, y).mean())

    v = sum(v_stat(a[i : i + 20], b[i : i + 20]) for i in range(0, 2000, 20)) / 100
    assert v > 0.3 and v > 20 * abs(mean)
    shifted = gaussian(2000, [1.0] + [0.0] * 7, eye, 2)
    mean_shift, std_shift = kid(a, shifted, subsets=20, subset_size=500, seed=0)
    assert mean_shift > 5 * std_shift > 0


def test_nn1_accuracy_half_for_one_distribution_one_for_separable_zero_for_copies():
    eye = torch.eye(4, dtype=torch.float64)
    a, b = gaussian(1000, [0.0] * 4, eye, 0), gaussian(1000, [0.0] * 4, eye, 1)
    assert abs(nn1_accuracy(a, b)["acc"] - 0.5) < 0.05
    far = gaussian(1000, [20.0] * 4, eye, 2)
    assert nn1_accuracy(a, far) == {"acc": 1.0, "acc_a": 1.0, "acc_b": 1.0}
    assert nn1_accuracy(a, a.clone())["acc"] == 0.0  # memorised copies


def test_sample_quality_reports_named_metrics():
    eye = torch.eye(4, dtype=torch.float64)
    a, b = gaussian(300, [0.0] * 4, eye, 0), gaussian(200, [1.0] * 4, eye, 1)
    q = sample_quality(a, b, kid_subsets=10, kid_subset_size=100)
    assert set(q) == {
        "fd_self", "kid_self", "kid_self_std", "nn1_acc", "nn1_acc_real", "nn1_acc_fake",
        "n_real", "n_fake", "feature_rms",
    }  # fmt: skip
    assert q["fd_self"] > 1 and q["kid_self"] > 0 and q["nn1_acc"] > 0.7 and q["n_fake"] == 200
    # One scalar rescaling of both sets (the real RMS) leaves every metric unchanged.
    scaled = sample_quality(100 * a, 100 * b, kid_subsets=10, kid_subset_size=100)
    assert scaled == pytest.approx({**q, "feature_rms": 100 * q["feature_rms"]}, rel=1e-12)
    assert math.isclose(q["fd_self"], fd_self(a, b) / q["feature_rms"] ** 2, rel_tol=1e-9)


def test_feature_classifier_learns_mnist_and_gives_penultimate_features(shared_data):
    tr = load_images("mnist", "train", "local", shared_data, limit=1500)
    te = load_images("mnist", "test", "local", shared_data, limit=300)
    model, acc = train_feature_classifier(
        tr.x, tr.labels, te.x, te.labels, tr.shape, epochs=2, batch_size=32, seed=0
    )
    assert isinstance(model, FeatureCNN) and acc > 0.8 and not model.training  # chance: 0.1
    feats = extract_features(model.features, te.x, batch_size=128)
    assert feats.shape == (300, 128) and feats.dtype == torch.float64 and (feats >= 0).all()
    # Real test digits are closer to real training digits than uniform noise is.
    ref = extract_features(model.features, tr.x[:300])
    noise = extract_features(model.features, torch.rand(300, 784) * 2 - 1)
    assert fd_self(ref, feats) < fd_self(ref, noise) / 5


def test_window_pool_is_adaptive_average_pooling():
    """The classifier's pooling equals nn.AdaptiveAvgPool2d (overlapping 7 -> 4 windows
    included), values and gradients, without adaptive_avg_pool2d's nondeterministic backward."""
    from pillm.generative.sample_quality import WindowAvgPool2d

    for h, w in ((7, 7), (8, 8), (9, 5)):
        x = torch.randn(3, 2, h, w, dtype=torch.float64, requires_grad=True)
        ours, ref = WindowAvgPool2d(4)(x), torch.nn.AdaptiveAvgPool2d(4)(x)
        assert torch.allclose(ours, ref, atol=1e-12)
        g = torch.randn_like(ref)
        (ga,) = torch.autograd.grad(ours, x, g)
        (gb,) = torch.autograd.grad(ref, x, g)
        assert torch.allclose(ga, gb, atol=1e-12)
