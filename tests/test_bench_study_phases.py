"""benchmarks/study_phases.py: each phase's wall, jobs and GPU energy from a build run in phases;
benchmarks/gpu_readme_command.sh's PHASES: the build script it writes runs one Snakemake per
phase, in order, and records each phase's span."""

import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

# Tests of a benchmark script: run in CI (`pytest -m bench`), not in the default selection.
pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 30, 12, 0, 0).timestamp()


def power_log(path: Path, watts: list[float]) -> None:
    """nvidia-smi's CSV, one sample a second from T0 (local time, as the host writes it)."""
    lines = []
    for i, w in enumerate(watts):
        stamp = datetime.fromtimestamp(T0 + i).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{stamp}, 0, 100 %, 1000 MiB, {w} W, 1980 MHz")
    path.write_text("timestamp, index, utilization.gpu\n" + "\n".join(lines) + "\n")


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "study_phases.py"), *args],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def row(out: str, name: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(name + " "))


def test_phase_energy_wall_and_jobs(tmp_path):
    # 10 s at 600 W, then 10 s at 100 W: phase a spans the first 10 s, phase b the next 10
    power_log(tmp_path / "gpu_util.csv", [600.0] * 10 + [100.0] * 10)
    (tmp_path / "phases.tsv").write_text(f"a\t{T0}\t{T0 + 10}\t0\nb\t{T0 + 10}\t{T0 + 20}\t1\n")
    (tmp_path / "snakemake.a.log").write_text("Finished jobid: 1 (Rule: x)\nFinished jobid: 2\n")
    (tmp_path / "snakemake.b.log").write_text("Finished jobid: 3\n")
    out = run(str(tmp_path / "phases.tsv"), str(tmp_path / "gpu_util.csv"), "--logs", str(tmp_path))
    a, b, total = row(out, "a"), row(out, "b"), row(out, "sum")
    assert a[1:6] == ["10.0", "2", "600", "600", "6.0"]  # wall, jobs, mean W, peak W, kJ
    assert b[1:6] == ["10.0", "1", "100", "100", "1.0"] and b[-1] == "1"  # its exit code
    assert a[6] == "85.7%" and total[1] == "20.0" and total[-1] == "7.0"
    # seconds at the build's mean power (350 W): 6 kJ / 350 W
    assert a[7] == "17.1"


def test_whole_build_span(tmp_path):
    power_log(tmp_path / "gpu_util.csv", [300.0] * 30)
    (tmp_path / "t0").write_text(f"{T0 + 5}\n")
    (tmp_path / "t1").write_text(f"{T0 + 15}\n")
    out = run("--whole", str(tmp_path / "t0"), str(tmp_path / "t1"), str(tmp_path / "gpu_util.csv"))
    assert row(out, "whole")[1:6] == ["10.0", "-", "300", "300", "3.0"]
    assert "sum" not in out


def test_phases_build_script(tmp_path):
    """The build script PHASES writes: one Snakemake per phase, each leaving out the later
    phases' rules (and the summaries), the last the remainder, each span recorded."""
    script = (REPO / "benchmarks" / "gpu_readme_command.sh").read_text()
    block = re.search(r"\n  \{  # the build as a script.*?\n  \} >\"\$b/build.sh\"\n", script, re.S)
    assert block, "gpu_readme_command.sh: the build script's block moved"
    b = tmp_path / "build"
    b.mkdir()
    gen = (
        f"b={b}; LIMIT=(--omit-from aggregate claims); TRIGGERS=(); DETACH=1\n"
        'PHASES="lm=run_lm lm_extras;lora=lora_rate lora;rest="\n' + block.group(0)
    )
    subprocess.run(["bash", "-c", gen], check=True)
    text = (b / "build.sh").read_text()
    runs = [line for line in text.splitlines() if "-m snakemake" in line]
    assert len(runs) == 3
    assert "--omit-from aggregate claims lora_rate lora" in runs[0]
    assert f"{b}/snakemake.lm.log" in runs[0]
    assert re.search(r"--omit-from aggregate claims +>", runs[1])  # lora: nothing after it
    assert re.search(r"--omit-from aggregate claims +>", runs[2])
    assert not any("--until" in r for r in runs)
    assert "timeout" not in text
    # run it with a stand-in python: every phase records its span and exit code
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        '#!/bin/sh\necho "Finished jobid: 1"\ncase "$*" in *claims) exit 2;; esac\n'
    )
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nsleep 30\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    subprocess.run(["bash", str(b / "build.sh")], check=True,
                   env={"PATH": f"{bin_dir}:/usr/bin:/bin"})  # fmt: skip
    phases = [line.split("\t") for line in (b / "phases.tsv").read_text().splitlines()]
    assert [p[0] for p in phases] == ["lm", "lora", "rest"]
    assert [p[3] for p in phases] == ["0", "2", "2"]  # the runs that leave nothing more out
    assert all(float(p[1]) <= float(p[2]) for p in phases)
    assert (b / "rc").read_text().strip() == "2"  # a failed phase fails the build


def test_one_phase_per_study_covers_every_gpu_rule_once():
    """PHASES=studies: every GPU rule of the workflow in exactly one phase, the last phase the
    remainder, and the string gpu_readme_command.sh reads."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from study_phases import STUDIES, phases_arg
    finally:
        sys.path.pop(0)
    from pillm.estimate import GPU_RULES

    named = [r for rules in STUDIES.values() for r in rules]
    assert len(named) == len(set(named))
    assert set(GPU_RULES) <= set(named), set(GPU_RULES) - set(named)
    assert list(STUDIES.values())[-1] == ()
    assert run("--studies").strip() == phases_arg()
    assert phases_arg().startswith("lm=run_lm ") and phases_arg().endswith(";rest=")
    rules = set(re.findall(r"^(?:local)?rule (\w+):", "\n".join(
        p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk")), re.M))  # fmt: skip
    assert set(named) <= rules, set(named) - rules  # no phase names a rule the workflow lacks
