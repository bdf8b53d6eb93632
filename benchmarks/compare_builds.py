"""Which science results do two builds of the paper DAG share, bit for bit?

    python benchmarks/compare_builds.py BUILD_A/results/paper BUILD_B/results/paper

Reads every result-record file (a JSON list of records with ``metric`` and ``value``, the
pipeline's report contract) under the first tree and its namesake under the second, and
counts per study (the first two path parts, e.g. ``lm/attn_only``) how many science values
are equal and how many differ, with a few examples. A value is matched with the one at the
same place in the other file: the same metric's n-th record (a file holds one metric for
several seeds, starts, fractions or samplers, in the order the job wrote them). Timing and
memory metrics (names ending in ``_s``, ``_ms``, ``_mb``, or holding ``time``, ``seconds``,
``memory``, ``per_s``, ...) are left out: they differ on every run. Where pyarrow is
importable, the jobs' parquet files (the probe's R² values per block, curves) are compared too,
cell by cell: row n with row n, numeric columns only, timing columns left out (and, in a long
table with a ``metric`` column such as the summaries, the rows of timing metrics). Standard library
otherwise, so it runs where the GPU builds run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

TIMING_ENDINGS = ("_s", "_ms", "_mb")
TIMING_PARTS = ("time", "seconds", "per_s", "memory", "throughput", "speed", "startup")


def is_timing(metric: str) -> bool:
    """Seconds, rates and memory (``train_time_s``, ``tokens_per_s``, ``peak_memory_mb``), not
    counts that merely contain ``_s`` (``train_steps``, ``best_step``)."""
    return metric.endswith(TIMING_ENDINGS) or any(t in metric for t in TIMING_PARTS)


def science_values(path: Path) -> dict[tuple[str, int], float] | None:
    """(metric, its n-th record in the file) -> value, timings left out; None if ``path`` is
    not a result-record file."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(records, list) and records and isinstance(records[0], dict)):
        return None
    if "metric" not in records[0]:
        return None
    seen: dict[str, int] = defaultdict(int)
    values = {}
    for r in records:
        n, seen[r["metric"]] = seen[r["metric"]], seen[r["metric"]] + 1
        if not is_timing(r["metric"]):
            values[(r["metric"], n)] = r["value"]
    return values


def table_values(path: Path) -> dict[tuple[str, int], float] | None:
    """(column, row) -> value of a parquet file's numeric, non-timing columns; None without
    pyarrow or for an unreadable file."""
    try:
        import pyarrow.parquet as pq
        import pyarrow.types as pt
    except ImportError:
        return None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError):
        return None
    # A long table (the summaries: one row per metric, its value in ``value``/``mean``/...)
    # names each row's metric: a timing row is left out as a timing column is.
    names = table.column("metric").to_pylist() if "metric" in table.column_names else None
    timing_rows = {r for r, m in enumerate(names or []) if isinstance(m, str) and is_timing(m)}
    return {
        (name, row): value
        for name, column in zip(table.column_names, table.columns, strict=True)
        if (pt.is_integer(column.type) or pt.is_floating(column.type)) and not is_timing(name)
        for row, value in enumerate(column.to_pylist())
        if row not in timing_rows
    }


def same(x: object, y: object) -> bool:
    """Equal, NaN counting as equal to NaN (a held-out R² of an all-zero target is NaN in both)."""
    return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)


def compare(a: Path, b: Path, examples: int = 3) -> dict[str, dict]:
    """study -> {"equal": n, "differ": n, "missing": n, "examples": [...]}."""
    out: dict[str, dict] = defaultdict(lambda: {"equal": 0, "differ": 0, "missing": 0,
                                                "examples": []})  # fmt: skip
    files = [(p, science_values) for p in a.rglob("*.json")]
    files += [(p, table_values) for p in a.rglob("*.parquet")]
    for path, read in sorted(files):
        ours = read(path)
        if ours is None:
            continue
        rel = path.relative_to(a)
        theirs = read(b / rel) or {}
        study = out["/".join(rel.parts[:2])]
        for key, value in ours.items():
            if key not in theirs:
                study["missing"] += 1
            elif same(value, theirs[key]):
                study["equal"] += 1
            else:
                study["differ"] += 1
                if len(study["examples"]) < examples:
                    study["examples"].append([str(rel), key[0], value, theirs[key]])
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--out", type=Path, help="also write the counts as JSON here")
    args = ap.parse_args()
    for root in (args.first, args.second):
        if not root.is_dir():
            sys.exit(f"compare_builds: {root} is not a folder (give two results/paper trees)")
    report = compare(args.first, args.second)
    for study, row in sorted(report.items()):
        print(f"{study:32s} equal {row['equal']:5d}  differ {row['differ']:4d}  "
              f"missing {row['missing']:3d}")  # fmt: skip
        for example in row["examples"]:
            print("    ", *example)
    total = {k: sum(r[k] for r in report.values()) for k in ("equal", "differ", "missing")}
    print(f"all: {total}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
