"""Image datasets (MNIST, CIFAR-10) as flat float32 rows in [-1, 1], and sample-grid figures.

The files, sources, subsets and decoding are ``pillm.data.image_files``'s (uint8 pixels, no
torch); here each uint8 v becomes v / 127.5 - 1 in a float32 tensor.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pillm.data.image_files import (
    SPLITS,
    RawImages,
    decode_uint8,
    raw_from_hf_dataset,
    read_images,
    read_images_hub,
    read_images_local,
    subset_rows,
)
from pillm.data.revisions import Revisions

__all__ = ["SPLITS", "ImageData", "decode_images", "from_hf_dataset", "load_images",
           "load_images_hub", "load_images_local", "subset_rows"]  # fmt: skip


@dataclass
class ImageData:
    """``x`` (n, C·H·W) float32 in [-1, 1], ``labels`` (n,) int64, ``shape`` (C, H, W), rows."""

    x: torch.Tensor
    labels: torch.Tensor
    shape: tuple[int, int, int]
    index: torch.Tensor  # (n,) row numbers in the split's file
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.x.shape[0]


def to_float(pixels: np.ndarray) -> torch.Tensor:
    """uint8 pixels -> float32 in [-1, 1] (v / 127.5 - 1), same shape."""
    return torch.from_numpy(pixels).float() / 127.5 - 1.0


def image_data(raw: RawImages) -> ImageData:
    return ImageData(
        to_float(raw.pixels), torch.from_numpy(raw.labels), raw.shape,
        torch.from_numpy(raw.index), raw.meta,
    )  # fmt: skip


def decode_images(
    blobs: list[bytes], shape: tuple[int, int, int], workers: int = 1
) -> torch.Tensor:
    """PNG/JPEG bytes -> (n, C·H·W) float32 in [-1, 1], flattened channel-first
    (``image_files.decode_uint8``, ``workers`` processes)."""
    return to_float(decode_uint8(blobs, shape, workers))


def load_images_local(
    name: str,
    split: str,
    local_dir: str | os.PathLike,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
) -> ImageData:
    """Read ``<local_dir>/<name>/<split>.parquet`` after verifying it against SHA256SUMS."""
    return image_data(read_images_local(name, split, local_dir, limit, subset_seed, workers))


def load_images_hub(
    name: str,
    split: str,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
    revisions: Revisions = None,
) -> ImageData:
    """``datasets.load_dataset(repo, split=..., revision=...)`` at ``data.revisions``;
    offline, a DataError."""
    return image_data(read_images_hub(name, split, limit, subset_seed, workers, revisions))


def from_hf_dataset(
    ds, name: str, limit: int | None = None, subset_seed: int | None = 0, workers: int = 1
) -> ImageData:
    """A ``datasets.Dataset`` with the spec's image column and ``label`` -> ImageData, decoded
    exactly as the local path decodes."""
    return image_data(raw_from_hf_dataset(ds, name, limit, subset_seed, workers))


def load_images(
    name: str,
    split: str,
    source: str = "auto",
    local_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
    revisions: Revisions = None,
) -> ImageData:
    """``image_files.read_images``'s images (the arguments are its own) as float rows."""
    return image_data(
        read_images(name, split, source, local_dir, limit, subset_seed, workers, revisions)
    )


def to_uint8_images(x: torch.Tensor, shape: tuple[int, int, int]) -> np.ndarray:
    """(n, C·H·W) in [-1, 1] -> (n, H, W, C) uint8; values outside [-1, 1] are clipped."""
    c, h, w = shape
    a = ((x.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return a.reshape(-1, c, h, w).permute(0, 2, 3, 1).numpy()


def make_grid(
    x: torch.Tensor, shape: tuple[int, int, int], nrow: int | None = None, pad: int = 2
) -> np.ndarray:
    """Tile n images row-major into one (rows·(H+pad)+pad, nrow·(W+pad)+pad, C) uint8 array.

    Image i sits at row i // nrow, column i % nrow; padding and empty cells are white (255).
    """
    imgs = to_uint8_images(x, shape)
    n, h, w, c = imgs.shape
    nrow = nrow or max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / nrow))
    grid = np.full((rows * (h + pad) + pad, nrow * (w + pad) + pad, c), 255, dtype=np.uint8)
    for i in range(n):
        r, col = divmod(i, nrow)
        top, left = pad + r * (h + pad), pad + col * (w + pad)
        grid[top : top + h, left : left + w] = imgs[i]
    return grid


def save_image_grid(
    x: torch.Tensor,
    shape: tuple[int, int, int],
    path: str | os.PathLike,
    nrow: int | None = None,
    title: str | None = None,
    dpi: int = 150,
) -> Path:
    """Write a sample grid with matplotlib (format from the suffix, e.g. .png/.pdf), atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    grid = make_grid(x, shape, nrow)
    fig, ax = plt.subplots(figsize=(grid.shape[1] / 40, grid.shape[0] / 40 + (0.3 if title else 0)))
    ax.imshow(grid[..., 0] if grid.shape[2] == 1 else grid, cmap="gray", vmin=0, vmax=255)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
