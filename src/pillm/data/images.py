"""Image datasets (MNIST, CIFAR-10) as flat float32 rows in [-1, 1], and sample-grid figures.

Two sources, one result (as ``data.py`` does for text):

- ``local``: the offline mirror (``shared/data``): ``<name>/{train,test}.parquet`` with an image
  column of ``{bytes, path}`` PNG/JPEG structs and a ``label`` column, every file checked against
  ``SHA256SUMS`` before it is read (``sha256sum -c`` semantics, a mismatch is an error).
- ``hub``: ``datasets.load_dataset(repo, split=..., revision=<pinned>)`` (``HUB_DATASETS``) with
  the same columns; offline, the hub library's own error becomes a message naming data.local_dir.
- ``auto``: ``local`` from the mirror at ``local_dir``, built there from the hub when absent.

Subsets: ``limit`` images, either a uniformly random subset drawn with ``subset_seed`` (the
default; the mirror's CIFAR-10 files are sorted by label, so "the first n rows" would be one
class) or, with ``subset_seed=None``, the first ``limit`` rows. Chosen rows keep the file order and
their row numbers travel in ``ImageData.index``, so a subset is the same on every machine. Each image is flattened channel-first,
(C, H, W) -> C·H·W, and mapped from uint8 v to v / 127.5 - 1. Note that the mirror's CIFAR-10
images are JPEG re-encodings (lossy): fine for comparisons inside this project only.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pillm.data.files import DataError, hub_call, pinned, read_checksums, verify_file
from pillm.data.image_specs import IMAGE_DATASETS, ImageSpec
from pillm.data.sources import resolve_source

SPLITS = ("train", "test")


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


def _spec(name: str) -> ImageSpec:
    if name not in IMAGE_DATASETS:
        raise DataError(f"unknown image dataset {name!r}; known: {sorted(IMAGE_DATASETS)}")
    return IMAGE_DATASETS[name]


def _check_split_limit(split: str, limit: int | None) -> None:
    if split not in SPLITS:
        raise DataError(f"image split must be one of {SPLITS}, got {split!r}")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of images or None, got {limit}")


def decode_images(
    blobs: list[bytes], shape: tuple[int, int, int], workers: int = 1
) -> torch.Tensor:
    """PNG/JPEG bytes -> (n, C·H·W) float32 in [-1, 1], flattened channel-first.

    ``workers`` > 1 decodes slices in that many forked processes (PIL's per-image Python
    dominates: preparing CIFAR-10's 60,000 JPEGs took 6.6 s in one process, 5.0 s in two, on 2
    cores); the bytes decoded are the same.
    """
    if workers > 1 and len(blobs) >= 4 * workers:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        per = math.ceil(len(blobs) / workers)
        parts = [blobs[i : i + per] for i in range(0, len(blobs), per)]
        fork = multiprocessing.get_context("fork")  # no re-import of torch in each worker
        with ProcessPoolExecutor(len(parts), mp_context=fork) as pool:
            starts = range(0, len(blobs), per)
            out = np.concatenate(list(pool.map(_decode_uint8, parts, [shape] * len(parts), starts)))
    else:
        out = _decode_uint8(blobs, shape)
    x = torch.from_numpy(out.reshape(len(blobs), -1)).float()
    return x / 127.5 - 1.0


def _decode_uint8(blobs: list[bytes], shape: tuple[int, int, int], first: int = 0) -> np.ndarray:
    """(n, C, H, W) uint8 of the images; ``first``: the first one's number (error messages)."""
    from PIL import Image

    c, h, w = shape
    mode = "L" if c == 1 else "RGB"
    out = np.empty((len(blobs), c, h, w), dtype=np.uint8)
    for i, blob in enumerate(blobs):
        with Image.open(io.BytesIO(blob)) as im:
            a = np.asarray(im.convert(mode))  # (H, W) or (H, W, C)
        if a.shape[:2] != (h, w):
            raise DataError(f"image {first + i} has size {a.shape[:2]}, expected {(h, w)}")
        out[i] = a[None] if c == 1 else a.transpose(2, 0, 1)
    return out


def subset_rows(n: int, limit: int | None, subset_seed: int | None) -> np.ndarray:
    """Row numbers to keep, ascending: all, the first ``limit``, or a seeded random subset."""
    if limit is None or limit >= n:
        return np.arange(n)
    if subset_seed is None:
        return np.arange(limit)
    return np.sort(np.random.default_rng(subset_seed).choice(n, size=limit, replace=False))


def _build(table, spec: ImageSpec, rows: np.ndarray, meta: dict, workers: int = 1) -> ImageData:
    table = table.take(rows)
    blobs = [r["bytes"] for r in table.column(spec.image_column).to_pylist()]
    labels = torch.tensor(table.column("label").to_pylist(), dtype=torch.int64)
    index = torch.from_numpy(rows.astype(np.int64))
    return ImageData(decode_images(blobs, spec.shape, workers), labels, spec.shape, index, meta)


def load_images_local(
    name: str,
    split: str,
    local_dir: str | os.PathLike,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
) -> ImageData:
    """Read ``<local_dir>/<name>/<split>.parquet`` after verifying it against SHA256SUMS."""
    import pyarrow.parquet as pq

    spec = _spec(name)
    _check_split_limit(split, limit)
    local_dir = Path(local_dir)
    rel = f"{spec.local_dir}/{split}.parquet"
    digest = verify_file(local_dir, rel, read_checksums(local_dir))
    table = pq.read_table(local_dir / rel, columns=[spec.image_column, "label"])
    rows = subset_rows(table.num_rows, limit, subset_seed)
    meta = {"source": "local", "dataset": name, "split": split, "file": rel, "sha256": digest}
    meta.update(limit=limit, subset_seed=subset_seed, n_split=table.num_rows)
    return _build(table, spec, rows, meta, workers)


def load_images_hub(
    name: str, split: str, limit: int | None = None, subset_seed: int | None = 0, workers: int = 1
) -> ImageData:
    """``datasets.load_dataset(repo, split=..., revision=<pinned>)``; offline, a DataError."""
    spec = _spec(name)
    _check_split_limit(split, limit)
    hub = pinned(name)
    import datasets

    what = f"{hub.repo_id!r} (it is {spec.local_dir}/{{train,test}}.parquet in the mirror)"
    ds = hub_call(what, datasets.load_dataset, hub.repo_id, split=split, revision=hub.revision)
    data = from_hf_dataset(ds, name, limit, subset_seed, workers)
    data.meta.update(source="hub", split=split, hub_id=hub.repo_id, revision=hub.revision)
    return data


def from_hf_dataset(
    ds, name: str, limit: int | None = None, subset_seed: int | None = 0, workers: int = 1
) -> ImageData:
    """A ``datasets.Dataset`` with the spec's image column and ``label`` -> ImageData.

    Images are re-read as their stored bytes and decoded exactly as the local path decodes them.
    """
    import datasets

    spec = _spec(name)
    ds = ds.cast_column(spec.image_column, datasets.Image(decode=False))
    rows = subset_rows(len(ds), limit, subset_seed)
    meta = {"dataset": name, "fingerprint": ds._fingerprint, "n_split": len(ds)}
    meta.update(limit=limit, subset_seed=subset_seed)
    return _build(ds.with_format("arrow")[:], spec, rows, meta, workers)


def load_images(
    name: str,
    split: str,
    source: str = "auto",
    local_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
) -> ImageData:
    """Load ``limit`` images (all when None) of ``name``'s ``split`` from ``source``.

    ``subset_seed``: seed of the uniformly random subset; None takes the first ``limit`` rows.
    ``workers``: processes that decode the images (``decode_images``).
    """
    source, local_dir = resolve_source(source, local_dir)
    if source == "local":
        if local_dir is None:
            raise DataError("data.source is 'local' but data.local_dir is not set")
        return load_images_local(name, split, local_dir, limit, subset_seed, workers)
    return load_images_hub(name, split, limit, subset_seed, workers)


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
