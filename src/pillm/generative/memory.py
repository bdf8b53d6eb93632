"""What a generative fit declares of GPU memory (``gpu_mem_mb``), by its size: a PIL fit by its
Gram statistics, an output-layer AdamW fit by its cached rows. Torch-free (the DAG reads it)."""

from __future__ import annotations

from typing import Any

from pillm.data.image_specs import IMAGE_DATASETS

Setting = Any  # a pillm.generative.plan.Setting (which imports this module)


def pil_fit_memory_mb(cfg: dict, dataset: str, setting: Setting) -> int:
    """GPU memory (MiB) a PIL fit of ``setting`` on ``dataset`` declares (``generative``
    section): ten times the bytes of its float64 Gram and cross-products (p² + p·D numbers for
    p features and D pixels), plus 1 GiB for the CUDA context and the allocator's cache.

    The fit's allocator peak is 7.7-8.8 times those bytes once p >= 2,833 (measured on an H100
    over p = 2,833-8,977 and D = 784, 3,072: 680-5,121 MiB); below that the images and samples
    weigh more (473 MiB at p = 1,809), which the 1 GiB covers. Declaring by the feature count
    rather than one flat figure lets the small fits share a GPU: at a flat 8 GB each, the
    paper config's twenty fits would declare 160 GB where their peaks sum to 55 GB, and wait
    for declared memory that lies idle.
    """
    p, d = _shape(cfg, dataset, setting)
    return 1024 + round(10 * 8 * (p * p + p * d) / 2**20)


def _shape(cfg: dict, dataset: str, setting: Setting) -> tuple[int, int]:
    """(features p, pixels D) of ``setting``'s output map on ``dataset``."""
    d = IMAGE_DATASETS[dataset].pixels
    f = setting.feature_options(cfg)
    return f["n_proj"] * f["width"] + (d if f["direct_link"] else 0) + 1, d


def adamw_out_memory_mb(cfg: dict, dataset: str, setting: Setting) -> int:
    """GPU memory (MiB) an output-layer AdamW fit declares (``generative`` section): 1.25 times
    the bytes of its cached float32 rows (N·K pairs of p features, D targets) and of five (K, p,
    D) maps (weights, gradient, two AdamW moments, the kept copy), plus a PIL fit's 1 GiB."""
    p, d = _shape(cfg, dataset, setting)
    n_fit = round(
        (cfg["n_train"] or IMAGE_DATASETS[dataset].rows[0]) * (1 - cfg["heldout_fraction"])
    )
    per_image = cfg["flow" if setting.model == "flow" else "diffusion"]["pairs_per_image"]
    floats = setting.n_buckets * (per_image * n_fit * (p + d) + 5 * p * d)
    return 1024 + round(1.25 * 4 * floats / 2**20)
