import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PILLM_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "SHA256SUMS").is_file():
        pytest.fail(f"offline data mirror not found at {SHARED_DATA}; set PILLM_DATA")
    return SHARED_DATA
