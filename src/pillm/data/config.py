"""The ``data`` section as a job reads it."""

from __future__ import annotations

from dataclasses import dataclass

from pillm.core.config import Section


@dataclass(frozen=True)
class DataConfig(Section):
    corpus: str
    local_dir: str  # the mirror (SHA256SUMS); with source auto, built there from the hub if absent
    heldout_fraction: float
    source: str = "auto"  # "auto" (local_dir's mirror, else built from the hub), "local" or "hub"
