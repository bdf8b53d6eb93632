"""Image datasets' files (MNIST, CIFAR-10) decoded to uint8 pixel rows, without torch: what
``gen-images`` writes once for every generative job (``prepare_images``), and what
``pillm.data.images`` maps to float rows.

Two sources, one result (as ``data.py`` does for text):

- ``local``: the offline mirror (``shared/data``): ``<name>/{train,test}.parquet`` with an image
  column of ``{bytes, path}`` PNG/JPEG structs and a ``label`` column, every file checked against
  ``SHA256SUMS`` before it is read (``sha256sum -c`` semantics, a mismatch is an error).
- ``hub``: ``datasets.load_dataset(repo, split=..., revision=...)`` (``HUB_DATASETS`` at
  ``data.revisions``) with
  the same columns; offline, the hub library's own error becomes a message naming data.local_dir.
- ``auto``: ``local`` from the mirror at ``local_dir``, built there from the hub when absent.

Subsets: ``limit`` images, either a uniformly random subset drawn with ``subset_seed`` (the
default; the mirror's CIFAR-10 files are sorted by label, so "the first n rows" would be one
class) or, with ``subset_seed=None``, the first ``limit`` rows. Chosen rows keep the file order and
their row numbers travel in ``index``, so a subset is the same on every machine. Each image is
flattened channel-first, (C, H, W) -> C·H·W. Note that the mirror's CIFAR-10 images are JPEG
re-encodings (lossy): fine for comparisons inside this project only.

No torch here: the image decodes start the generative part of the DAG, and every generative
job waits for them (importing torch cost them seconds of that wait).
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pillm.core.log import say
from pillm.core.records import atomic_path
from pillm.data.files import DataError, hub_call, read_checksums, verify_file
from pillm.data.image_specs import IMAGE_DATASETS, ImageSpec
from pillm.data.reading import FIX, read_parquet
from pillm.data.revisions import Revisions, hub_source, local_record
from pillm.data.sources import resolve_source

SPLITS = ("train", "test")


@dataclass
class RawImages:
    """``pixels`` (n, C·H·W) uint8, ``labels`` (n,) int64, ``shape`` (C, H, W), ``index`` (n,)
    row numbers in the split's file, ``meta`` where they came from."""

    pixels: np.ndarray
    labels: np.ndarray
    shape: tuple[int, int, int]
    index: np.ndarray
    meta: dict = field(default_factory=dict)


def image_spec(name: str) -> ImageSpec:
    if name not in IMAGE_DATASETS:
        raise DataError(f"unknown image dataset {name!r}; known: {sorted(IMAGE_DATASETS)}")
    return IMAGE_DATASETS[name]


def _check_split_limit(split: str, limit: int | None) -> None:
    if split not in SPLITS:
        raise DataError(f"image split must be one of {SPLITS}, got {split!r}")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of images or None, got {limit}")


def decode_uint8(blobs: list[bytes], shape: tuple[int, int, int], workers: int = 1) -> np.ndarray:
    """PNG/JPEG bytes -> (n, C·H·W) uint8, flattened channel-first.

    ``workers`` > 1 decodes slices in that many forked processes (PIL's per-image Python
    dominates: preparing CIFAR-10's 60,000 JPEGs took 6.6 s in one process, 5.0 s in two, on 2
    cores); the bytes decoded are the same.
    """
    if workers > 1 and len(blobs) >= 4 * workers:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        per = math.ceil(len(blobs) / workers)
        parts = [blobs[i : i + per] for i in range(0, len(blobs), per)]
        fork = multiprocessing.get_context("fork")  # no re-import in each worker
        with ProcessPoolExecutor(len(parts), mp_context=fork) as pool:
            starts = range(0, len(blobs), per)
            out = np.concatenate(list(pool.map(_decode_block, parts, [shape] * len(parts), starts)))
    else:
        out = _decode_block(blobs, shape)
    return out.reshape(len(blobs), -1)


def _decode_block(blobs: list[bytes], shape: tuple[int, int, int], first: int = 0) -> np.ndarray:
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


def _build(table, spec: ImageSpec, rows: np.ndarray, meta: dict, workers: int = 1) -> RawImages:
    table = table.take(rows)
    blobs = [r["bytes"] for r in table.column(spec.image_column).to_pylist()]
    labels = np.asarray(table.column("label").to_pylist(), dtype=np.int64)
    pixels = decode_uint8(blobs, spec.shape, workers)
    return RawImages(pixels, labels, spec.shape, rows.astype(np.int64), meta)


def read_images_local(
    name: str,
    split: str,
    local_dir: str | os.PathLike,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
) -> RawImages:
    """Read ``<local_dir>/<name>/<split>.parquet`` after verifying it against SHA256SUMS."""
    spec = image_spec(name)
    _check_split_limit(split, limit)
    local_dir = Path(local_dir)
    rel = f"{spec.local_dir}/{split}.parquet"
    digest = verify_file(local_dir, rel, read_checksums(local_dir))
    table = read_parquet(local_dir / rel, [spec.image_column, "label"])
    rows = subset_rows(table.num_rows, limit, subset_seed)
    meta = {"source": "local", "dataset": name, "split": split, "file": rel, "sha256": digest}
    meta.update(limit=limit, subset_seed=subset_seed, n_split=table.num_rows)
    record = local_record(local_dir, name)
    meta.update(_origin(record), revisions={name: record})
    try:
        return _build(table, spec, rows, meta, workers)
    except (DataError, OSError, ValueError, TypeError, KeyError) as err:  # PIL: OSError
        raise DataError(f"{local_dir / rel}: {err}; {FIX}") from None


def _origin(record: dict) -> dict:
    """A provenance record (``pillm.data.revisions``) as flat meta keys."""
    out = {"hub_id": record["repo"], "revision_how": record["how"]}
    return {**out, "revision": record["revision"]} if record["revision"] else out


def read_images_hub(
    name: str,
    split: str,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
    revisions: Revisions = None,
) -> RawImages:
    """``datasets.load_dataset(repo, split=..., revision=...)`` at ``data.revisions``; offline,
    a DataError."""
    spec = image_spec(name)
    _check_split_limit(split, limit)
    hub = hub_source(name, revisions)
    import datasets

    what = f"{hub.repo_id!r} (it is {spec.local_dir}/{{train,test}}.parquet in the mirror)"
    ds = hub_call(what, datasets.load_dataset, hub.repo_id, split=split, revision=hub.revision)
    raw = raw_from_hf_dataset(ds, name, limit, subset_seed, workers)
    record = hub.record()
    raw.meta.update(source="hub", split=split, revisions={name: record}, **_origin(record))
    return raw


def raw_from_hf_dataset(
    ds, name: str, limit: int | None = None, subset_seed: int | None = 0, workers: int = 1
) -> RawImages:
    """A ``datasets.Dataset`` with the spec's image column and ``label`` -> RawImages.

    Images are re-read as their stored bytes and decoded exactly as the local path decodes them.
    """
    import datasets

    spec = image_spec(name)
    ds = ds.cast_column(spec.image_column, datasets.Image(decode=False))
    rows = subset_rows(len(ds), limit, subset_seed)
    meta = {"dataset": name, "fingerprint": ds._fingerprint, "n_split": len(ds)}
    meta.update(limit=limit, subset_seed=subset_seed)
    return _build(ds.with_format("arrow")[:], spec, rows, meta, workers)


def read_images(
    name: str,
    split: str,
    source: str = "auto",
    local_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    subset_seed: int | None = 0,
    workers: int = 1,
    revisions: Revisions = None,
) -> RawImages:
    """``limit`` images (all when None) of ``name``'s ``split`` from ``source``.

    ``local_dir``: ``data.local_dir`` (None or "": ``$PILLM_DATA``, else the cache folder);
    ``subset_seed``: seed of the uniformly random subset; None takes the first ``limit`` rows.
    ``workers``: processes that decode the images (``decode_uint8``); ``revisions``:
    ``data.revisions`` (None: the committed pins).
    """
    source, local_dir = resolve_source(source, local_dir, revisions)
    if source == "local":
        return read_images_local(name, split, local_dir, limit, subset_seed, workers)
    return read_images_hub(name, split, limit, subset_seed, workers, revisions)


def prepare_images(dataset: str, data: dict, out_path: str, threads: int = 0) -> None:
    """Decode both splits once (local mirror, checksum-verified, or hub) into one uint8 .npz that
    every job of the dataset reads: the decode costs seconds, the read milliseconds.

    ``data`` is the config's data section (a dict, checked here once); ``threads``: processes
    that decode (0: one). Every GPU job of the dataset waits for this one."""
    from pillm.data.config import DataConfig

    source = DataConfig.from_dict(data, "data")
    arrays, meta = {}, {}
    for split in SPLITS:
        say(f"{dataset} {split}: decoding images ({threads or 1} process(es))")
        raw = read_images(
            dataset,
            split,
            source.source,
            source.local_dir,
            None,
            None,
            threads or 1,
            source.revisions,
        )
        arrays[f"{split}_x"] = raw.pixels
        arrays[f"{split}_y"] = raw.labels
        meta[split] = {
            k: v for k, v in raw.meta.items() if isinstance(v, str | int) or k == "revisions"
        }
        meta[split]["dataset"] = dataset
    arrays["meta"] = np.array(json.dumps(meta))
    say(f"{dataset}: writing {out_path}")
    with atomic_path(out_path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
