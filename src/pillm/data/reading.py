"""Reading a data file so that a damaged one stops the job with its name.

A mirror's SHA256SUMS catches a file that changed since its digest was taken, but a user's own
``data.local_dir`` may hold digests of files that were bad from the start (an empty split, a
text saved in Latin-1, a parquet cut short by a full disk or an interrupted copy). Every reader
of a data file goes through these functions, which raise ``DataError`` naming the file, what is
wrong with it and how to fix it, instead of a decoder's error without a path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pillm.data.files import DataError

FIX = "restore it from the original mirror (or rebuild the mirror: docs/data.md)"


def read_text(path: str | os.PathLike, allow_empty: bool = False) -> str:
    """A UTF-8 text file; DataError naming it when it is empty (only whitespace) or holds a
    byte sequence that is not UTF-8 (its offset and line are given)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err}); {FIX}") from None
    if not allow_empty and not data.strip():
        raise DataError(f"{path}: the file is empty (a corpus split needs text); {FIX}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(
            f"{path}: not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start} "
            f"(line {line}). Convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), then "
            f"update its digest in SHA256SUMS; or {FIX}"
        ) from None


def read_jsonl(path: str | os.PathLike, key: str) -> list[Any]:
    """``row[key]`` of every non-blank line of a JSON-lines file; DataError naming the file and
    line of a line that is not a JSON object with ``key``."""
    out = []
    for i, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(row[key])
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            raise DataError(
                f"{path}: line {i} is not a JSON object with a {key!r} field; {FIX}"
            ) from None
    return out


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None):
    """A pyarrow table of ``columns`` (all when None); DataError naming the file when it is not
    a readable parquet file (truncated, damaged, another format), lacks a column or has no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataError(
            f"{path}: not a readable parquet file with columns {columns or 'any'} ({first}): "
            f"it is truncated, damaged or not parquet; {FIX}"
        ) from None
    if table.num_rows == 0:
        raise DataError(f"{path}: the parquet file has no rows; {FIX}")
    return table
