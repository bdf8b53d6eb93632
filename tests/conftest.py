import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def mirror_folder() -> Path:
    """The data folder the tests read: $PILLM_DATA, else an offline mirror beside the checkout
    where one is (CI's layout), else the pipeline's own default (pillm.data.files), where the
    README's first command, run once online, builds the mirror."""
    if os.environ.get("PILLM_DATA"):
        return Path(os.environ["PILLM_DATA"])
    beside = REPO.parent / "shared" / "data"
    if (beside / "SHA256SUMS").is_file():
        return beside
    from pillm.data.files import default_data_dir

    return default_data_dir()


SHARED_DATA = mirror_folder()
# The tests' builds and commands read that folder (the pipeline's data.local_dir is empty).
os.environ["PILLM_DATA"] = str(SHARED_DATA.resolve())
SMOKE = ["--configfile", "config/smoke.yaml"]
SMOKE_TIMEOUT_S = 2400  # the smoke build on 2 shared cores (about 6 min alone): a wide margin


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped, with that reason, where none is
    visible (the GPU scripts select them with ``-m gpu``)."""
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "SHA256SUMS").is_file():
        pytest.fail(f"no data mirror in {SHARED_DATA} (no SHA256SUMS): run the README's first "
                    "command once online (it builds the mirror there from the hub), or set "
                    "PILLM_DATA to an offline mirror's folder")  # fmt: skip
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
    meta = {"vocab_size": 64, "bytes": {}, "tokens": {}, "corpus": "toy"}
    for split, n in sizes.items():
        ids = np.arange(n) % 40
        noise = rng.random(n) < 0.05
        ids[noise] = rng.integers(40, 64, noise.sum())
        np.save(out / f"{split}.npy", ids.astype(np.uint16))
        meta["bytes"][split] = 3 * n
        meta["tokens"][split] = n
    (out / "meta.json").write_text(json.dumps(meta))
    return out


class SmokeBuild:
    """The smoke pipeline built by ``snakemake --cores 2`` in a copy of this checkout, started in
    the background: the build is most of the suite's time and leaves part of 2 cores idle, so
    the unit tests run beside it (at a lower priority, so they do not lengthen it)."""

    def __init__(self, root: Path):
        self.repo = copy_worktree(root)
        self.log = root / "smoke_build.log"
        self.started = time.monotonic()
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                ["snakemake", "--cores", "2", *SMOKE], cwd=self.repo, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def wait(self) -> Path:
        """The built copy; AssertionError with the log's tail when the build failed."""
        left = SMOKE_TIMEOUT_S - (time.monotonic() - self.started)
        try:
            rc = self.proc.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"smoke build still running after {SMOKE_TIMEOUT_S} s "
                                 f"(log: {self.log})") from None  # fmt: skip
        if rc != 0:
            text = self.log.read_text()
            # A job's own error (no data, bad config) says the fix; a traceback's tail may not.
            causes = sorted(set(re.findall(r"^\S*(?:DataError|ConfigError): .*$", text, re.M)))
            raise AssertionError(f"smoke build failed (rc {rc}, log {self.log}):\n"
                                 + "".join(f"{c}\n" for c in causes) + text[-6000:])  # fmt: skip
        return self.repo

    def stop(self) -> None:
        if self.proc.poll() is None:  # snakemake and its jobs: one process group
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session", autouse=True)
def smoke_build(request, tmp_path_factory):
    """Starts the smoke build at the session's first test when a workflow test is selected
    (tests/test_workflow.py's ``workdir`` waits for it); None otherwise."""
    if not any(item.get_closest_marker("workflow") for item in request.session.items):
        yield None
        return
    build = SmokeBuild(tmp_path_factory.mktemp("clone"))
    os.nice(5)  # this process and the tests' subprocesses yield the cores to the build
    yield build
    build.stop()
