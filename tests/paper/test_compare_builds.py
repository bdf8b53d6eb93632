"""benchmarks/compare_builds.py counts equal and differing science values of two builds."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# Tests of a benchmark script: run in CI (`pytest -m bench`), not in the default selection.
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


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


def test_compare_builds_matches_records_in_order_and_keeps_step_counts(tmp_path):
    """Two records of one metric and seed (SAFFU's warm and cold start) are two values: a change
    in the first is found whatever the second does; step counts are science, not timings."""
    spec = importlib.util.spec_from_file_location("compare_builds", BENCH / "compare_builds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compare, is_timing = module.compare, module.is_timing

    def write(root, first_ppl, steps):
        path = root / "saffu/cat/f100/metrics.json"
        path.parent.mkdir(parents=True)
        records = [
            {"metric": m, "value": v, "seed": 1, "init": init}
            for init, ppl in (("explicit", first_ppl), ("random", 300.0))
            for m, v in (("test_ppl", ppl), ("train_steps", steps), ("job_time_s", 9.0))
        ]
        path.write_text(json.dumps(records))

    write(tmp_path / "a", 298.9, 1000)
    write(tmp_path / "b", 297.9, 1025)
    row = compare(tmp_path / "a", tmp_path / "b")["saffu/cat"]
    assert (row["equal"], row["differ"], row["missing"]) == (1, 3, 0)
    assert not is_timing("best_step") and not is_timing("train_steps")
    assert all(
        map(
            is_timing,
            (
                "train_time_s",
                "tokens_per_s",
                "peak_memory_mb",
                "fit_seconds",
                "step_ms",
                "startup_time_s",
            ),
        )
    )


def test_compare_builds_reads_parquet_cells_and_leaves_timing_columns_out(tmp_path):
    """A job's parquet table (the probe's R² per block) is compared cell by cell, row with row;
    strings and timing columns are not science values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = importlib.util.spec_from_file_location("compare_builds", BENCH / "compare_builds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for root, low in (("a", 0.9671708024413976), ("b", 0.9671708024413977)):
        path = tmp_path / root / "probe/pillm-s1/wikitext2/blocks.parquet"
        path.parent.mkdir(parents=True)
        table = {"name": ["h.0", "h.1"], "r2_lin": [0.97, 0.98], "r2_lin_lo": [low, 0.95],
                 "fit_time_s": [1.0, 2.0] if root == "a" else [3.0, 4.0]}  # fmt: skip
        pq.write_table(pa.table(table), path)
    row = module.compare(tmp_path / "a", tmp_path / "b")["probe/pillm-s1"]
    assert (row["equal"], row["differ"], row["missing"]) == (3, 1, 0)
    assert row["examples"][0][1:] == ["r2_lin_lo", 0.9671708024413976, 0.9671708024413977]


def test_compare_builds_leaves_timing_rows_of_long_summaries_out(tmp_path):
    """A summary parquet holds one row per metric (``metric`` names it, ``mean`` its value): a
    timing metric's row is left out, a science metric's row is compared."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = importlib.util.spec_from_file_location("compare_builds", BENCH / "compare_builds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for root, (loss, secs) in (("a", (2.5, 10.0)), ("b", (2.25, 12.0))):
        path = tmp_path / root / "summary/lm.parquet"
        path.parent.mkdir(parents=True)
        table = {"metric": ["test_loss", "train_time_s", "train_steps"],
                 "mean": [loss, secs, 60.0], "n": [3, 3, 3]}  # fmt: skip
        pq.write_table(pa.table(table), path)
    row = module.compare(tmp_path / "a", tmp_path / "b")["summary/lm.parquet"]
    assert (row["equal"], row["differ"], row["missing"]) == (3, 1, 0)  # n twice, steps; loss
    assert row["examples"][0][1:] == ["mean", 2.5, 2.25]


def test_compare_builds_counts_nan_in_both_as_equal(tmp_path):
    """A value that is NaN in both builds (the held-out R² of an all-zero target) is equal; NaN
    against a number differs."""
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "lm/x/seed0/metrics.json", {"heldout_r2": float("nan"), "test_loss": float("nan")})
    _write(b, "lm/x/seed0/metrics.json", {"heldout_r2": float("nan"), "test_loss": 1.0})
    spec = importlib.util.spec_from_file_location("compare_builds", BENCH / "compare_builds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts = module.compare(a, b)["lm/x"]
    assert (counts["equal"], counts["differ"]) == (1, 1)
