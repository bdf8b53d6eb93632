"""Real FID (Inception-v3 pool features), the optional online path of the generative study.

Offline, the pipeline scores samples in its own classifier's features (sample_quality.py). With
``generative.real_fid: true`` a job also reports ``fid``: it needs the ``pytorch-fid`` package and
network access for its Inception weights (downloaded once into the torch hub cache), and stops
with a message naming the key otherwise. CIFAR-10 here is a JPEG re-encoding, so these FIDs are
still not comparable with published ones.
"""

from __future__ import annotations

import torch

KEY = "generative.real_fid"


class RealFidUnavailable(RuntimeError):
    pass


def inception(device: str):
    try:
        from pytorch_fid.inception import InceptionV3
    except ImportError as err:
        raise RealFidUnavailable(
            f"{KEY}: true needs `pip install pytorch-fid` (and network for its Inception "
            f"weights); set {KEY}: false to score samples in the pipeline's own features only"
        ) from err
    try:
        model = InceptionV3([InceptionV3.BLOCK_INDEX_BY_DIM[2048]])
    except Exception as err:  # the weight download: URLError, HTTPError, socket timeouts
        raise RealFidUnavailable(
            f"{KEY}: could not load the Inception weights ({type(err).__name__}: {err}); "
            f"they download from GitHub on first use. Offline, set {KEY}: false"
        ) from err
    return model.to(device).eval()


@torch.no_grad()
def inception_features(model, x: torch.Tensor, shape: tuple[int, int, int], batch: int = 500):
    """(n, C·H·W) images in [-1, 1] -> (n, 2048) pool features (grey images repeated to RGB)."""
    device = next(model.parameters()).device
    out = []
    for i in range(0, x.shape[0], batch):
        imgs = ((x[i : i + batch].clamp(-1, 1) + 1) / 2).reshape(-1, *shape).to(device)
        if imgs.shape[1] == 1:
            imgs = imgs.repeat(1, 3, 1, 1)
        out.append(model(imgs)[0].flatten(1).double().cpu())
    return torch.cat(out)


def real_fid(real: torch.Tensor, fake: torch.Tensor, shape: tuple[int, int, int], device: str):
    from pillm.generative.sample_quality import frechet_distance

    model = inception(device)
    return frechet_distance(
        inception_features(model, real, shape), inception_features(model, fake, shape)
    )
