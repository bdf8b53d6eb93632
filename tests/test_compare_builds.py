"""benchmarks/compare_builds.py counts equal and differing science values of two builds."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _write(root: Path, rel: str, values: dict[str, float]) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [{"metric": k, "value": v, "seed": 0, "variant": "x"} for k, v in values.items()]
    path.write_text(json.dumps(records))


def test_compare_builds_counts_science_values_and_ignores_timings(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "lm/base/seed0/metrics.json", {"test_loss": 1.0, "tokens_per_s": 5.0})
    _write(b, "lm/base/seed0/metrics.json", {"test_loss": 1.0, "tokens_per_s": 9.0})
    _write(a, "lm/attn/seed0/metrics.json", {"test_loss": 2.0, "test_acc": 0.5})
    _write(b, "lm/attn/seed0/metrics.json", {"test_loss": 2.5})
    (a / "lm" / "notes.json").write_text('{"not": "records"}')
    out = tmp_path / "counts.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_builds.py"),
                          str(a), str(b), "--out", str(out)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    counts = json.loads(out.read_text())
    assert counts["lm/base"] | {"examples": []} == {"equal": 1, "differ": 0, "missing": 0,
                                                    "examples": []}  # fmt: skip
    assert (counts["lm/attn"]["differ"], counts["lm/attn"]["missing"]) == (1, 1)
    assert counts["lm/attn"]["examples"][0][1:] == ["test_loss", 2.0, 2.5]
    assert "all: {'equal': 1, 'differ': 1, 'missing': 1}" in run.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_builds.py"),
                          str(a), str(tmp_path / "nope")], capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "is not a folder" in bad.stderr
