"""Selection on a grid of a hyperparameter (λ of a ridge solve, a learning rate, an n-gram
order), shared by every study: a pick on an edge of its grid extends the grid that way, at most a
configured number of points per side, and the record says whether the first pick was on an edge,
how many points were added and whether the final pick still is (``GridPick``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pillm.core.config import ConfigError


@dataclass(frozen=True)
class GridPick:
    """One selection on a grid, after any extension (``search_grid``)."""

    value: float
    grid: tuple[float, ...]  # the final grid, ascending
    edge_hit: bool  # the pick on the configured grid was on an edge
    extensions: int  # points added (both sides together)
    on_edge: bool  # the final pick is still on an edge (extension bound reached)


def grid_ratio(grid: Sequence[float]) -> float:
    """Mean ratio between neighbouring positive values of a grid (geometric grids: their ratio)."""
    pos = sorted(x for x in grid if x > 0)
    if len(pos) < 2 or pos[-1] == pos[0]:
        raise ValueError(f"grid {list(grid)} needs two distinct positive values to be extended")
    return (pos[-1] / pos[0]) ** (1 / (len(pos) - 1))


def check_extendable(grid: Sequence[float], extend: int, key: str, extend_key: str) -> None:
    """ConfigError, before any job, for a grid that is extended past an edge (``extend`` > 0)
    without two distinct positive values: their ratio is the step (``grid_ratio``)."""
    if extend and len({x for x in grid if x > 0}) < 2:
        raise ConfigError(
            f"{key} = {list(grid)}: extending it past an edge ({extend_key} = {extend}) needs "
            f"two distinct positive values (their ratio is the step); add one, or set "
            f"{extend_key}: 0"
        )


def edge_side(grid: Sequence[float], pick: float, scores: dict[float, float] | None = None) -> int:
    """+1: the pick is the largest value; -1: the smallest positive one, or 0 (then smaller
    positive values are worth trying); 0: interior. A 0 in the grid ("no step") is the bound of
    its domain, so a pick of 0 that survives extension is not an edge (``search_grid``).

    With ``scores`` (value -> score, lower is better), a pick that ties with its inner neighbour
    is not on an edge: the curve is flat there (e.g. a zero target scores every λ alike), so the
    grid has nothing to resolve in that direction."""
    grid = sorted(grid)
    pos = [x for x in grid if x > 0]
    if pick == grid[-1]:
        side = 1
    elif pick == 0 or pick == pos[0]:
        side = -1
    else:
        return 0
    if scores is not None and len(grid) > 1:
        i = grid.index(pick)
        inner = grid[i - 1] if side > 0 else grid[i + 1]
        if scores[inner] == scores[pick]:
            return 0
    return side


def search_grid(
    grid: Sequence[float],
    max_extend: int,
    pick: Callable[[list[float]], tuple[Any, float, dict[float, float]]],
    key: str = "grid",
    step: float | None = None,
    floor: float | None = None,
    extend_key: str = "",
) -> tuple[Any, GridPick]:
    """``pick(grid) -> (result, chosen value, {value: score})``; while the choice is on an edge
    (``edge_side``), add one point beyond it and pick again, at most ``max_extend`` points per
    side: largest x ratio or smallest positive / ratio (a geometric grid), or largest + ``step``
    or smallest - ``step`` (an arithmetic one, as n-gram orders). A pick at ``floor``, the
    smallest value the domain has, is no edge. Returns the last result and its ``GridPick``;
    ``key`` names the grid's config key in errors, ``extend_key`` the caller's key of
    ``max_extend`` (the fix: set it to 0)."""
    values = sorted(float(x) for x in grid)
    try:
        ratio = grid_ratio(values) if max_extend and step is None else 1.0
    except ValueError as err:
        fix = f" (or set {extend_key}: 0)" if extend_key else ""
        raise ConfigError(f"{key}: {err}{fix}") from None

    def side_of(chosen: float, scores: dict[float, float]) -> int:
        side = edge_side(values, chosen, scores)
        return 0 if side < 0 and floor is not None and chosen <= floor else side

    result, chosen, scores = pick(values)
    first = side_of(chosen, scores)
    added = {-1: 0, 1: 0}
    while (side := side_of(chosen, scores)) and added[side] < max_extend:
        if step is not None:
            new = values[-1] + step if side > 0 else values[0] - step
        else:
            pos = [x for x in values if x > 0]
            new = pos[-1] * ratio if side > 0 else pos[0] / ratio
        values = sorted([*values, float(f"{new:.12g}")])  # 1e-08, not 1.0000000000000002e-08
        added[side] += 1
        result, chosen, scores = pick(values)
    last = side_of(chosen, scores) != 0 and chosen != 0
    return result, GridPick(chosen, tuple(values), first != 0, sum(added.values()), last)
