"""Sample quality without Inception weights: metrics in a classifier the pipeline trains itself.

No Inception network is available offline, so FID in the usual sense cannot be computed. Instead:

- ``FeatureCNN``: a small CNN classifier trained here on the same image dataset
  (``train_feature_classifier``); its penultimate layer (``features``) is the feature space.
- ``fd_self``: the Fréchet distance between Gaussians fitted to real and generated features,
  ‖μ_r - μ_g‖² + Tr(Σ_r + Σ_g - 2 (Σ_r^½ Σ_g Σ_r^½)^½). Same formula as FID, different
  features: numbers are comparable only within this project and one trained classifier.
- ``kid_self``: KID, the unbiased MMD² with the cubic polynomial kernel k(x, y) = (xᵀy / d + 1)³,
  averaged over random subsets (mean and std over subsets reported).
- ``nn1_accuracy``: leave-one-out 1-nearest-neighbour two-sample accuracy on the pooled sets;
  0.5 means indistinguishable, 1.0 fully separable, below 0.5 points to copies of the real data.

All metric arithmetic is float64.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from pillm.core.adamw import AdamW
from pillm.core.runtime import deterministic


class WindowAvgPool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d(size)`` (the same windows, also overlapping ones: MNIST's 7 x 7
    to 4 x 4) as slices and means, rows then columns. Its backward is deterministic on CUDA,
    where adaptive_avg_pool2d's is not (a classifier trained twice from one seed may differ)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    @staticmethod
    def _windows(n: int, size: int) -> list[tuple[int, int]]:
        return [(i * n // size, -(-(i + 1) * n // size)) for i in range(size)]

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        rows = torch.stack([x[..., a:b, :].mean(-2) for a, b in self._windows(h, self.size)], -2)
        return torch.stack([rows[..., a:b].mean(-1) for a, b in self._windows(w, self.size)], -1)


class FeatureCNN(nn.Module):
    """conv3x3(32)-BN-ReLU-pool, conv3x3(64)-BN-ReLU-pool, avg-pool to 4x4, FC(feat_dim)-ReLU
    (the feature layer), FC(classes). Input: flat rows (n, C·H·W) in [-1, 1] as images.py
    returns them. Call ``.eval()`` before extracting features (BatchNorm running statistics).
    """

    def __init__(self, shape: tuple[int, int, int], classes: int = 10, feat_dim: int = 128):
        super().__init__()
        self.shape = tuple(shape)
        c = shape[0]
        self.body = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            WindowAvgPool2d(4), nn.Flatten(),
            nn.Linear(64 * 16, feat_dim), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(feat_dim, classes)

    def features(self, x: Tensor) -> Tensor:
        """(n, C·H·W) -> penultimate features (n, feat_dim)."""
        return self.body(x.float().reshape(-1, *self.shape))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


@torch.no_grad()
def classifier_accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> float:
    device = next(model.parameters()).device
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], batch_size):
        logits = model(x[i : i + batch_size].to(device))
        correct += int((logits.argmax(1).cpu() == y[i : i + batch_size].cpu()).sum())
    return correct / max(1, x.shape[0])


def train_feature_classifier(
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    shape: tuple[int, int, int],
    *,
    epochs: int = 2,
    batch_size: int = 128,
    lr: float = 2e-3,
    classes: int = 10,
    feat_dim: int = 128,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[FeatureCNN, float]:
    """Train FeatureCNN by AdamW (cosine-decayed lr) on cross-entropy; return it and test accuracy.

    Deterministic given ``seed`` on one device: init and batch order come from the seed, and on
    CUDA it trains with deterministic kernels where PyTorch has them (core.runtime.deterministic,
    warn-only); the net pools with WindowAvgPool2d, whose backward is deterministic where
    adaptive_avg_pool2d's is not. Whether two CUDA runs give the same MNIST classifier is not
    measured.
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    model = FeatureCNN(shape, classes, feat_dim).to(device)
    opt = AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    n = x_train.shape[0]
    steps_per_epoch = max(1, n // batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
    g = torch.Generator().manual_seed(seed)
    model.train()
    bar = tqdm(total=total, desc="feature CNN", file=sys.stderr, mininterval=5, ascii=True)
    with deterministic(device.type == "cuda"):
        for _ in range(epochs):
            order = torch.randperm(n, generator=g)
            for s in range(steps_per_epoch):
                idx = order[s * batch_size : (s + 1) * batch_size]
                loss = F.cross_entropy(model(x_train[idx].to(device)), y_train[idx].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                bar.update()
    bar.close()
    model.eval()
    return model, classifier_accuracy(model, x_test, y_test)


@torch.no_grad()
def extract_features(
    feature_fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int = 1024
) -> Tensor:
    """Apply ``feature_fn`` (e.g. ``FeatureCNN.features``) in batches; (n, f) float64 on CPU."""
    device = x.device
    if isinstance(feature_fn, nn.Module):
        device = next(feature_fn.parameters()).device
    elif hasattr(feature_fn, "__self__") and isinstance(feature_fn.__self__, nn.Module):
        device = next(feature_fn.__self__.parameters()).device
    out = [
        feature_fn(x[i : i + batch_size].to(device)).double().cpu()
        for i in range(0, x.shape[0], batch_size)
    ]
    return torch.cat(out)


def _mean_cov(f: Tensor) -> tuple[Tensor, Tensor]:
    f = f.double()
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"need (n >= 2, d) features, got {tuple(f.shape)}")
    mu = f.mean(0)
    c = f - mu
    return mu, c.T @ c / (f.shape[0] - 1)


def _sqrt_psd(a: Tensor) -> Tensor:
    evals, evecs = torch.linalg.eigh((a + a.T) / 2)
    return (evecs * evals.clamp_min(0).sqrt()) @ evecs.T


def frechet_distance_gaussian(mu1: Tensor, cov1: Tensor, mu2: Tensor, cov2: Tensor) -> float:
    """‖μ1 - μ2‖² + Tr(Σ1 + Σ2 - 2 (Σ1^½ Σ2 Σ1^½)^½), float64.

    Tr((Σ1 Σ2)^½) is computed as Σ √eig(Σ1^½ Σ2 Σ1^½) of a symmetric PSD matrix: no complex
    sqrtm, negative rounding noise in the eigenvalues clamped to 0.
    """
    mu1, mu2, cov1, cov2 = (t.double() for t in (mu1, mu2, cov1, cov2))
    s1 = _sqrt_psd(cov1)
    m = s1 @ cov2 @ s1
    tr_sqrt = torch.linalg.eigvalsh((m + m.T) / 2).clamp_min(0).sqrt().sum()
    diff = mu1 - mu2
    return float(diff @ diff + torch.trace(cov1) + torch.trace(cov2) - 2 * tr_sqrt)


def frechet_distance(feats_a: Tensor, feats_b: Tensor) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets (n_a, d), (n_b, d).

    With a self-trained classifier's features this is the project's ``fd_self`` (not FID).
    """
    return frechet_distance_gaussian(*_mean_cov(feats_a), *_mean_cov(feats_b))


def fd_self(feats_real: Tensor, feats_fake: Tensor) -> float:
    """Fréchet distance in the features of the pipeline's own classifier (named so, not FID)."""
    return frechet_distance(feats_real, feats_fake)


def _poly_kernel(a: Tensor, b: Tensor) -> Tensor:
    return (a @ b.T / a.shape[1] + 1.0) ** 3


def mmd2_unbiased(a: Tensor, b: Tensor) -> float:
    """Unbiased MMD² with k(x, y) = (xᵀy / d + 1)³: within-set means drop the diagonal.

    MMD²_u = Σ_{i≠j} k(a_i, a_j) / (m(m-1)) + Σ_{i≠j} k(b_i, b_j) / (n(n-1)) - 2 Σ k(a_i, b_j) / (mn)
    """
    a, b = a.double(), b.double()
    m, n = a.shape[0], b.shape[0]
    if m < 2 or n < 2:
        raise ValueError(f"need at least 2 rows per set, got {m} and {n}")
    kaa, kbb, kab = _poly_kernel(a, a), _poly_kernel(b, b), _poly_kernel(a, b)
    term_a = (kaa.sum() - kaa.diagonal().sum()) / (m * (m - 1))
    term_b = (kbb.sum() - kbb.diagonal().sum()) / (n * (n - 1))
    return float(term_a + term_b - 2 * kab.mean())


def kid(
    feats_a: Tensor,
    feats_b: Tensor,
    subsets: int = 100,
    subset_size: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """KID: mean and std of ``mmd2_unbiased`` over random subsets (without replacement within
    a subset) of size min(subset_size, n_a, n_b). Can be slightly negative when a ≈ b.
    """
    m = min(subset_size, feats_a.shape[0], feats_b.shape[0])
    g = torch.Generator().manual_seed(seed)
    vals = []
    for _ in range(subsets):
        ia = torch.randperm(feats_a.shape[0], generator=g)[:m]
        ib = torch.randperm(feats_b.shape[0], generator=g)[:m]
        vals.append(mmd2_unbiased(feats_a[ia], feats_b[ib]))
    v = torch.tensor(vals, dtype=torch.float64)
    return float(v.mean()), float(v.std()) if subsets > 1 else 0.0


@torch.no_grad()
def nn1_accuracy(feats_a: Tensor, feats_b: Tensor, chunk: int = 2048) -> dict[str, float]:
    """Leave-one-out 1-NN two-sample test on the pooled sets (Euclidean, float64).

    Each point is labelled by its nearest other point; returns the accuracy over all points and
    per set (``acc_a``, ``acc_b``). 0.5 (for equal sizes): indistinguishable; 1.0: separable;
    near 0: every point has an exact/near copy in the other set (memorisation).
    """
    x = torch.cat([feats_a, feats_b]).double()
    labels = torch.cat([torch.zeros(feats_a.shape[0]), torch.ones(feats_b.shape[0])]).bool()
    sq = (x * x).sum(1)
    nearest = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(0, x.shape[0], chunk):
        d = sq[i : i + chunk, None] - 2 * x[i : i + chunk] @ x.T + sq[None]  # (c, N)
        rows = torch.arange(i, min(i + chunk, x.shape[0]))
        d[rows - i, rows] = float("inf")  # leave one out
        nearest[i : i + chunk] = d.argmin(1)
    correct = labels[nearest] == labels
    na = feats_a.shape[0]
    return {
        "acc": float(correct.double().mean()),
        "acc_a": float(correct[:na].double().mean()),
        "acc_b": float(correct[na:].double().mean()),
    }


def sample_quality(
    feats_real: Tensor,
    feats_fake: Tensor,
    kid_subsets: int = 100,
    kid_subset_size: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """All metrics of real vs generated features as flat records (names say what they are).

    Both sets are first divided by one scalar, the real features' RMS (``feature_rms``), so the
    numbers do not depend on the classifier's arbitrary feature scale: the cubic kernel of KID
    sees xᵀy/d of order 1, as with Inception features. 1-NN is scale-free; FD scales by 1/rms².
    """
    rms = float(feats_real.double().pow(2).mean().sqrt())
    if not rms > 0:
        raise ValueError("real features are all zero; the feature network is degenerate")
    feats_real, feats_fake = feats_real.double() / rms, feats_fake.double() / rms
    kid_mean, kid_std = kid(feats_real, feats_fake, kid_subsets, kid_subset_size, seed)
    nn1 = nn1_accuracy(feats_real, feats_fake)
    return {
        "fd_self": fd_self(feats_real, feats_fake),
        "kid_self": kid_mean,
        "kid_self_std": kid_std,
        "nn1_acc": nn1["acc"],
        "nn1_acc_real": nn1["acc_a"],
        "nn1_acc_fake": nn1["acc_b"],
        "n_real": float(feats_real.shape[0]),
        "n_fake": float(feats_fake.shape[0]),
        "feature_rms": rms,
    }
