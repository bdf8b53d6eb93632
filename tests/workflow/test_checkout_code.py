"""Jobs run the code of the checkout whose workflow scheduled them, not whichever pillm is
installed (the test environment installs this repository; the copy below is a second clone)."""

from __future__ import annotations

import subprocess

from ..conftest import SHARED_DATA, SMOKE, copy_worktree

SENTINEL = "this clone's mirror_job ran"


def test_a_job_runs_its_own_checkouts_code(tmp_path):
    clone = copy_worktree(tmp_path)
    sources = clone / "src" / "pillm" / "data" / "sources.py"
    text = sources.read_text()
    assert "\ndef mirror_job(" in text
    # the CLI resolves the command's function by name after import: this one replaces it
    sources.write_text(
        f"{text}\n\ndef mirror_job(*args, **kwargs):\n    raise RuntimeError({SENTINEL!r})\n"
    )
    run = subprocess.run(
        ["snakemake", "--cores", "1", *SMOKE, "--config", f"data={{local_dir: {SHARED_DATA}}}",
         "--", "results/smoke/data/mirror.json"],
        cwd=clone, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = clone / "results" / "smoke" / "logs" / "mirror.log"
    assert run.returncode != 0, run.stdout[-2000:]
    assert SENTINEL in log.read_text(), log.read_text()[-2000:]
    assert not (clone / "results" / "smoke" / "data" / "mirror.json").exists()
