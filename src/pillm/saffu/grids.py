"""The grids a SAFFU job searches (smoothing mass, learning rate): a selection as
tidy metrics, and a chosen rate read back from another job's records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pillm.core.selection import GridPick


def grid_metrics(name: str, g: GridPick) -> dict[str, float]:
    """A selection as metrics: the value, whether the configured grid's pick was on an edge,
    how many points were added, and whether the final pick is still on an edge."""
    return {name: g.value, f"{name}_edge_hit": float(g.edge_hit),
            f"{name}_extensions": float(g.extensions), f"{name}_on_edge": float(g.on_edge)}  # fmt: skip


def reused_rates(
    path: str | Path, inits: Sequence[str]
) -> tuple[dict[str, tuple[float, GridPick]], str]:
    """Each start's chosen rate and its selection, as another job recorded them (its first
    seed's run), and that job's setting; ValueError naming the file when a start is missing."""
    import json

    rows = json.loads(Path(path).read_text())
    out = {}
    for init in inits:
        mine = [r for r in rows if r["init"] == init and r["metric"].startswith("lr")]
        if not mine:
            raise ValueError(f"{path}: no chosen rate of the {init!r} start to reuse")
        first = min(r["seed"] for r in mine)
        m = {r["metric"]: r["value"] for r in mine if r["seed"] == first}
        pick = GridPick(m["lr"], (), bool(m["lr_edge_hit"]), int(m["lr_extensions"]),
                        bool(m["lr_on_edge"]))  # fmt: skip
        out[init] = (m["lr"], pick)
    return out, rows[0]["variant"]
