"""The Snakefile's own imports need no polars: GPU hosts run the jobs without it."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^(?:from pillm[\w.]* import .+|import pillm[\w.]*)$", re.M)


def rule_imports() -> list[str]:
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    return [m.group(0) for f in files for m in IMPORT.finditer(f.read_text())]


def test_rule_imports_load_with_polars_hidden():
    lines = rule_imports()
    assert len(lines) > 5, "the rules' pillm imports were not found"
    code = "import sys\nsys.modules['polars'] = None\n" + "\n".join(lines)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
