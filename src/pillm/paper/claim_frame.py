"""The one frame every study hands to the claims rule: ``summary/claims/<study>.parquet``.

Two kinds of rows, one schema:
- seed rows (``b`` null): the value of one arm at one seed; paired claims pair two arms seed by
  seed and take the interval of the mean difference (``pillm.paper.claims``);
- interval rows (``b`` set): a difference ``a - b`` whose interval the study computed itself
  (a bootstrap over blocks or windows, say); claims with ``test: interval`` read these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from pillm.core.records import atomic_path

SCHEMA = {
    "a": pl.String,  # the arm (seed rows) or the first arm of the difference (interval rows)
    "b": pl.String,
    "seed": pl.Int64,
    "metric": pl.String,
    "value": pl.Float64,  # seed rows: the arm's value; interval rows: the difference a - b
    "lo": pl.Float64,
    "hi": pl.Float64,
    "n": pl.Int64,
    "method": pl.String,
}
SEED_KEYS = ("arm", "seed", "metric", "value")
INTERVAL_KEYS = ("a", "b", "metric", "diff", "lo", "hi", "n", "method")


def _check(row: Mapping[str, Any], keys: tuple[str, ...], kind: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise ValueError(f"claim frame {kind} row {dict(row)} lacks {missing}: it needs {keys}")


def claim_frame(
    seed_rows: Iterable[Mapping[str, Any]] = (), interval_rows: Iterable[Mapping[str, Any]] = ()
) -> pl.DataFrame:
    """The frame of a study's seed rows ({arm, seed, metric, value}) and interval rows
    ({a, b, metric, diff, lo, hi, n, method})."""
    rows = []
    for r in seed_rows:
        _check(r, SEED_KEYS, "seed")
        rows.append({"a": str(r["arm"]), "b": None, "seed": int(r["seed"]),
                     "metric": str(r["metric"]), "value": float(r["value"])})  # fmt: skip
    for r in interval_rows:
        _check(r, INTERVAL_KEYS, "interval")
        rows.append({"a": str(r["a"]), "b": str(r["b"]), "seed": None, "metric": str(r["metric"]),
                     "value": float(r["diff"]), "lo": float(r["lo"]), "hi": float(r["hi"]),
                     "n": int(r["n"]), "method": str(r["method"])})  # fmt: skip
    return pl.DataFrame(rows, schema=SCHEMA)


def write_claim_frame(
    path: str | Path,
    seed_rows: Iterable[Mapping[str, Any]] = (),
    interval_rows: Iterable[Mapping[str, Any]] = (),
) -> pl.DataFrame:
    """Write the frame atomically (temp file + rename); return it."""
    frame = claim_frame(seed_rows, interval_rows)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)
    return frame


def read_claim_frame(path: str | Path) -> pl.DataFrame:
    """A study's frame, checked against the schema (a file from elsewhere names what it lacks)."""
    frame = pl.read_parquet(path)
    missing = [c for c in SCHEMA if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a claim frame, columns {missing} missing")
    return frame.select(list(SCHEMA)).cast(SCHEMA)  # type: ignore[arg-type]
