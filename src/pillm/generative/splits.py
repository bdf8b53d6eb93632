"""What a generative job reads and how its records are named: seeded subsets of the image
splits, the held-out tail the fits pick λ and learning rates on, and the identity columns
(dataset, setting, seed, data policy) of every record a job writes."""

from __future__ import annotations

import json

import numpy as np
import torch

from pillm.core.records import IDENTITY
from pillm.core.ridge import split_heldout
from pillm.data.image_specs import IMAGE_DATASETS
from pillm.data.images import ImageData, subset_rows, to_float
from pillm.generative.config import GenerativeConfig


def load_split(images: str, split: str, limit: int, seed: int) -> ImageData:
    """``limit`` images of ``split`` (0: all), the same seeded subset ``load_images`` takes."""
    with np.load(images) as z:
        x, y = z[f"{split}_x"], z[f"{split}_y"]
        meta = json.loads(str(z["meta"]))[split]
    rows = subset_rows(len(x), limit or None, seed)
    xt = to_float(x[rows])
    shape = IMAGE_DATASETS[meta["dataset"]].shape
    return ImageData(xt, torch.from_numpy(y[rows]), shape, torch.from_numpy(rows), meta)


def data_policy(n_eval: int, n_fit: int, n_val: int) -> str:
    return (
        f"train split: {n_fit} images fitted, {n_val} held out for lambda; "
        f"samples scored against {n_eval} test images"
    )


def fit_data(images: str, gen: GenerativeConfig, device: str):
    """(fitted images, held-out images) on ``device``: the seeded train subset and its held-out
    tail. Copied once here, outside every fit's clock (AdamW's arms and PIL's streamed Gram
    chunks alike): a chunk copied from host memory would make the host wait for the GPU."""
    x = load_split(images, "train", gen.n_train, gen.seed).x.to(device)
    return split_heldout(x, gen.heldout_fraction)


def run_identity(dataset: str, setting: str, seed: int, policy: str) -> dict:
    identity = {
        "experiment": "generative", "variant": setting, "seed": seed, "corpus": dataset,
        "tokenizer": "-", "data_policy": policy,
    }  # fmt: skip
    assert set(identity) == set(IDENTITY)
    return identity
