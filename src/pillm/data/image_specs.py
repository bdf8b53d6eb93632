"""The image datasets' names, mirror folders and shapes, without torch (the DAG reads them)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ImageSpec:
    """Where an image dataset lives, and its image shape (C, H, W)."""

    local_dir: str  # folder inside the mirror holding {train,test}.parquet (hub: HUB_DATASETS)
    image_column: str
    shape: tuple[int, int, int]
    rows: tuple[int, int]  # images in the train and test splits (mirror and hub alike)
    classes: int = 10

    @property
    def pixels(self) -> int:
        """Values per image, C·H·W: a generative model's input and output size."""
        return math.prod(self.shape)


IMAGE_DATASETS: dict[str, ImageSpec] = {
    "mnist": ImageSpec("mnist", "image", (1, 28, 28), (60_000, 10_000)),
    "cifar10": ImageSpec("cifar10", "img", (3, 32, 32), (50_000, 10_000)),
}
