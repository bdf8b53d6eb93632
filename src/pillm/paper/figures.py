"""Shared figure helper: every figure is written as PDF (paper) and PNG (report), atomically."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # noqa: E402

from pillm.core.records import atomic_path  # noqa: E402


def save(fig: plt.Figure, pdf: str | Path, png: str | Path) -> None:
    for path in (pdf, png):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], bbox_inches="tight", dpi=150)
    plt.close(fig)
