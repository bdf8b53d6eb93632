"""Files of tensors and plain metadata: what every checkpoint the pipeline writes is.

A result folder may come from elsewhere (a colleague's build, a download), so loading one must
never run code. A tensor file is ``torch.save`` of exactly three entries:

    {"format": "pillm-tensors/1", "kind": <what it holds>, "meta": <JSON text>,
     "state_dict": {name: Tensor}}

and is read back with ``torch.load(weights_only=True)``, whose unpickler rebuilds tensors,
containers and numbers only and refuses any other object (a pickled ``__reduce__`` payload stops
there, before it runs). The entries are then checked against that shape: metadata is JSON text,
so nothing but str/int/float/bool/None/list/dict reaches the caller; ``kind`` keeps one file
type from being loaded as another. Every refusal is a ``TensorFileError`` naming the file.
The tensors come back bit for bit as saved (``torch.save`` stores their bytes).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pillm.core.records import atomic_path

FORMAT = "pillm-tensors/1"
ENTRIES = frozenset({"format", "kind", "meta", "state_dict"})


class TensorFileError(ValueError):
    """A file that is not a pillm tensor file of the expected kind; the message names it."""


@dataclass(frozen=True)
class TensorFile:
    """What a tensor file holds: named tensors (a module's state dict) and JSON metadata."""

    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]


def save_tensor_file(
    path: str | os.PathLike, kind: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]
) -> None:
    """Write ``tensors`` and ``meta`` (JSON-serialisable) atomically; ``kind`` names the file
    type (``pillm.gpt``), checked on load. TypeError when ``meta`` is not plain JSON."""
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"{path}: entries {bad} are not tensors; put plain values in meta")
    text = json.dumps(dict(meta), sort_keys=True, allow_nan=True)
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "kind": kind, "meta": text, "state_dict": tensors}, tmp)


def load_tensor_file(
    path: str | os.PathLike, kind: str, device: str | torch.device = "cpu"
) -> TensorFile:
    """The tensors (on ``device``) and metadata of a tensor file of ``kind``.

    Never runs code from the file: TensorFileError, naming it, for anything that is not such a
    file (a pickled object, a truncated or foreign file, another kind, another layout)."""
    path = Path(path)
    if not path.is_file():
        raise TensorFileError(f"{path}: no such file")
    try:
        obj = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        raise TensorFileError(
            f"{path}: refused, it holds objects other than tensors and plain values "
            f"({_unpickler_reason(err)}). It was not written by pillm, or was altered; pillm "
            "never loads such a file (it could run code). Rebuild it."
        ) from None
    except Exception as err:  # noqa: BLE001 - whatever a damaged file makes the reader raise
        raise TensorFileError(
            f"{path}: not a readable tensor file (truncated or not written by pillm: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); rebuild it"
        ) from None
    return _checked(path, obj, kind)


def _unpickler_reason(err: pickle.UnpicklingError) -> str:
    """The line of torch's refusal that says what was refused (e.g. 'Unsupported global:
    GLOBAL builtins.open')."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for line in lines:
        if "WeightsUnpickler error:" in line:
            reason = line.split("WeightsUnpickler error:", 1)[1]
            return reason.split(" was not an allowed global")[0].strip().rstrip(".")
    return lines[0] if lines else type(err).__name__


def _checked(path: Path, obj: Any, kind: str) -> TensorFile:
    """``obj`` as a TensorFile of ``kind``; TensorFileError naming ``path`` otherwise."""
    if not isinstance(obj, dict) or set(obj) != ENTRIES or obj.get("format") != FORMAT:
        have = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise TensorFileError(
            f"{path}: not a {FORMAT} file (entries {have}, expected {sorted(ENTRIES)}); it was "
            "written by another program or an older pillm: rebuild it"
        )
    if obj["kind"] != kind:
        raise TensorFileError(f"{path}: holds a {obj['kind']!r}, expected a {kind!r}")
    tensors = obj["state_dict"]
    if not isinstance(tensors, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()
    ):
        raise TensorFileError(
            f"{path}: its 'state_dict' entry is not a mapping of names to tensors"
        )
    try:
        meta = json.loads(obj["meta"]) if isinstance(obj["meta"], str) else None
    except json.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict):
        raise TensorFileError(f"{path}: its 'meta' entry is not JSON text of an object")
    return TensorFile(dict(tensors), meta)
