"""Which hub commit each data source is read at, and the record of it.

``data.revisions`` (``RevisionsConfig``) maps each hub source (a key of ``HUB_DATASETS``) to a
40-hex commit; its defaults are commits that public code pins (docs/data.md). A source whose
revision is null is resolved when it is first built: the current commit of its branch
(``HfApi().dataset_info(...).sha``, ``model_info`` for a model), used for that whole build and
recorded like every revision: in the built mirror's MIRROR.json and in the meta.json of every
corpus and token array (``HubSource.record``). Reading a mirror records the revisions it was
built from (its MIRROR.json), or that it is the offline mirror, which came from no hub commit,
with the digest of the SHA256SUMS that pins its files. Every run record carries the revisions of
the data it read (``pillm.core.records.data_revisions``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pillm.data.config import RevisionsConfig
from pillm.data.files import HUB_DATASETS, MIRROR_FILES, DataConfigError, DataError, hub_call

COMMIT = re.compile(r"^[0-9a-f]{40}$")
Revisions = RevisionsConfig | Mapping[str, Any] | None


@dataclass(frozen=True)
class HubSource:
    """A hub source at the commit a build reads it at, and how that commit was chosen."""

    key: str
    repo_id: str
    repo_type: str
    config: str | None
    revision: str
    how: str

    def record(self) -> dict[str, Any]:
        return {"repo": self.repo_id, "revision": self.revision, "how": self.how}


def pins(revisions: Revisions = None) -> dict[str, str | None]:
    """``data.revisions`` over the committed pins: {source: commit or None (resolve)}.
    ``revisions`` None: the committed pins; a key absent from it: its committed pin."""
    base = dataclasses.asdict(RevisionsConfig())
    if revisions is None:
        return base
    given = (
        dataclasses.asdict(revisions) if isinstance(revisions, RevisionsConfig) else dict(revisions)
    )
    unknown = sorted(set(given) - set(base))
    if unknown:
        raise DataConfigError(
            f"unknown data.revisions key(s) {', '.join(unknown)}; known: {', '.join(base)}"
        )
    for key, value in given.items():
        if value is not None and not COMMIT.match(str(value)):
            raise DataConfigError(
                f"data.revisions.{key}: {value!r} is not a commit; set a 40-hex commit of "
                f"{HUB_DATASETS[key].repo_id} (not a branch or tag), or null to use the current "
                "commit at the first build"
            )
    return {**base, **given}


def current_commit(key: str) -> str:
    """The current commit of hub source ``key``'s branch (one hub API call)."""
    from huggingface_hub import HfApi

    hub = HUB_DATASETS[key]
    api = HfApi()
    info = api.dataset_info if hub.repo_type == "dataset" else api.model_info
    result = hub_call(
        f"the current commit of {hub.repo_id} ({hub.branch})",
        info,
        hub.repo_id,
        revision=hub.branch,
        hint=f"Online, or with data.revisions.{key} set to a commit, the build can go on.",
    )
    sha = getattr(result, "sha", None)
    if not sha or not COMMIT.match(sha):
        raise DataError(f"the hub gave no commit for {hub.repo_id} ({hub.branch}): {sha!r}")
    return sha


def hub_source(key: str, revisions: Revisions = None) -> HubSource:
    """Hub source ``key`` at its pinned commit, or at the current commit of its branch (one
    API call) when ``data.revisions`` leaves it null."""
    if key not in HUB_DATASETS:
        raise DataError(f"unknown hub source {key!r}; known: {sorted(HUB_DATASETS)}")
    hub, pin = HUB_DATASETS[key], pins(revisions)[key]
    if pin:
        how = f"pinned (data.revisions.{key})"
    else:
        pin = current_commit(key)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        how = f"resolved at {when}: the current commit of {hub.branch} (data.revisions.{key}: null)"
    return HubSource(key, hub.repo_id, hub.repo_type, hub.config, pin, how)


def mirror_json(root: str | Path) -> dict | None:
    """A built mirror's MIRROR.json (``pillm.data.mirror``), None for the offline mirror."""
    path = Path(root) / "MIRROR.json"
    return json.loads(path.read_text()) if path.is_file() else None


def local_record(root: str | Path, key: str) -> dict[str, Any]:
    """The provenance of source ``key`` read from the mirror at ``root``: the revision it was
    built from (MIRROR.json), or for the offline mirror no revision and the digest of its
    SHA256SUMS (``sha256sums``)."""
    built, hub = mirror_json(root), HUB_DATASETS[key]
    if built is not None:
        if key in built.get("revisions", {}):
            return {**built["revisions"][key], "mirror": str(Path(root).resolve())}
        for rel, rec in built.get("files", {}).items():  # a mirror built before "revisions"
            if MIRROR_FILES.get(rel) and MIRROR_FILES[rel].dataset == key:
                how = "built from the hub (MIRROR.json)"
                return {"repo": rec["repo"], "revision": rec["revision"], "how": how}
    sums = Path(root) / "SHA256SUMS"
    return {
        "repo": hub.repo_id,
        "revision": None,
        "how": "offline mirror: not built from the hub, so no hub revision; its files are "
        "checked against its SHA256SUMS, whose digest (sha256sums) names this copy",
        "mirror": str(Path(root).resolve()),
        # a file of a few hundred bytes per data file: the mirror's identity, cheap to hash
        "sha256sums": hashlib.sha256(sums.read_bytes()).hexdigest() if sums.is_file() else None,
    }
