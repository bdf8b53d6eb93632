"""Builds to compare: a results folder, or a git revision's recorded copy (``REV:PATH``).

Both answer the same two questions, relative to the build's root: the bytes of a file, and the
files directly in a folder. ``pillm diff`` reads summaries and generated ``.tex`` through them,
so a build recorded in git at any revision compares like a results folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


class DiffInputError(ValueError):
    """A build that cannot be read: the message names it and what was expected."""


class Build:
    """Files of one build, addressed relative to its root."""

    label: str

    def read(self, rel: str) -> bytes | None:
        raise NotImplementedError

    def files(self, rel_dir: str) -> list[str]:
        """Names of the files directly in ``rel_dir`` (empty if it is not there)."""
        raise NotImplementedError


class FolderBuild(Build):
    def __init__(self, root: Path) -> None:
        self.root, self.label = root, str(root)

    def read(self, rel: str) -> bytes | None:
        path = self.root / rel
        return path.read_bytes() if path.is_file() else None

    def files(self, rel_dir: str) -> list[str]:
        d = self.root / rel_dir
        return sorted(p.name for p in d.iterdir() if p.is_file()) if d.is_dir() else []


class GitBuild(Build):
    def __init__(self, repo: Path, rev: str, path: str) -> None:
        self.repo, self.rev, self.path = repo, rev, path.strip("/")  # from the repository root
        self.label = f"{rev}:{self.path}"
        listing = self._git(
            "ls-tree", "-r", "--full-tree", "--name-only", rev, "--", self.path or "."
        )
        self.names = set(listing.decode().splitlines())
        if not self.names:
            raise DiffInputError(f"{self.label}: git revision {rev} has no files under {path!r}")

    def _git(self, *args: str) -> bytes:
        out = subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True)
        if out.returncode:
            raise DiffInputError(f"git {' '.join(args)}: {out.stderr.decode().strip()}")
        return out.stdout

    def _full(self, rel: str) -> str:
        return f"{self.path}/{rel}".strip("/").replace("//", "/")

    def read(self, rel: str) -> bytes | None:
        full = self._full(rel)
        return self._git("show", f"{self.rev}:{full}") if full in self.names else None

    def files(self, rel_dir: str) -> list[str]:
        prefix = self._full(rel_dir) + "/" if self._full(rel_dir) else ""
        return sorted(
            n[len(prefix) :]
            for n in self.names
            if n.startswith(prefix) and "/" not in n[len(prefix) :]
        )


def open_build(spec: str, repo: str | Path = ".") -> Build:
    """A folder when ``spec`` is one, else ``REV:PATH`` of the git repository ``repo``."""
    if Path(spec).is_dir():
        return FolderBuild(Path(spec))
    rev, sep, path = spec.partition(":")
    if not sep or not rev or rev.startswith("-"):  # a leading '-' would be a git option
        raise DiffInputError(
            f"{spec!r} is neither a folder nor REV:PATH; give a results folder such as "
            "results/smoke or a git revision and its path (HEAD:tests/data/paper_build_summary)"
        )
    return GitBuild(Path(repo), rev, path)


def first_dir(build: Build, candidates: tuple[str, ...], suffix: str) -> str | None:
    """The first of ``candidates`` holding a ``*suffix`` file (None when none does)."""
    return next((d for d in candidates if any(f.endswith(suffix) for f in build.files(d))), None)


SUMMARY_DIRS = ("summary", "")
GENERATED_DIRS = ("paper/generated", "generated", "paper/build/generated", "")
