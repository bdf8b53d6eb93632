import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PILLM_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "SHA256SUMS").is_file():
        pytest.fail(f"offline data mirror not found at {SHARED_DATA}; set PILLM_DATA")
    return SHARED_DATA


def copy_worktree(root: Path) -> Path:
    """A copy of this checkout (tracked and untracked, not ignored files) at ``root/main``, with
    ``root/shared/data`` linking the offline mirror: what a clean clone sees."""
    (root / "shared").mkdir()
    (root / "shared" / "data").symlink_to(SHARED_DATA)
    repo = root / "main"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in files:
        if (REPO / rel).is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, repo / rel)
    return repo


def write_toy_tokens(out: Path, sizes: dict[str, int]) -> Path:
    """A learnable toy language: a repeating cycle of 40 tokens with 5 % noise, per split."""
    rng = np.random.default_rng(0)
    meta = {"vocab_size": 64, "bytes": {}, "tokens": {}}
    for split, n in sizes.items():
        ids = np.arange(n) % 40
        noise = rng.random(n) < 0.05
        ids[noise] = rng.integers(40, 64, noise.sum())
        np.save(out / f"{split}.npy", ids.astype(np.uint16))
        meta["bytes"][split] = 3 * n
        meta["tokens"][split] = n
    (out / "meta.json").write_text(json.dumps(meta))
    return out
