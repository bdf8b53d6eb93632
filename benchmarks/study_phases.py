"""Each study's GPU time and energy alone, from one build run in phases.

``gpu_readme_command.sh`` with PHASES runs the README's build as one Snakemake run per phase (a
study's rules, then the next study's), so no two studies share the GPU: a phase's wall is that
study's time on the device with its own jobs sharing the GPU as the build shares it, and the
energy the card drew over the phase (nvidia-smi's power samples, summed over time) is its GPU
work. A phase's tail, where its last jobs leave the GPU part idle, is in its wall but draws
little power: energy is the figure that adds up across studies, wall the one a user waits for.
Prints one row per phase (wall, jobs finished, mean and peak power, energy, energy in seconds at
the whole build's mean power) and the sums.

    python benchmarks/study_phases.py BUILD_DIR/phases.tsv BUILD_DIR/gpu_util.csv --logs BUILD_DIR
    python benchmarks/study_phases.py --whole BUILD_DIR/t0 BUILD_DIR/t1 BUILD_DIR/gpu_util.csv
    python benchmarks/study_phases.py --studies   # the phases PHASES=studies runs

``phases.tsv``: name, start and end (seconds since the epoch), Snakemake's exit code, per line.
``--whole``: one span from the build's t0 and t1 files (the energy of a build run at once).
"""

from __future__ import annotations

import argparse
import csv
from datetime import datetime
from pathlib import Path

# One phase per study, in build order (a study's rules need only earlier studies' outputs), each
# naming every rule of its study; the last phase builds whatever is left. PHASES=studies of
# gpu_readme_command.sh runs these.
STUDIES: dict[str, tuple[str, ...]] = {
    "lm": ("run_lm", "lm_extras", "sensitivity_run", "solve_timing"),
    "lora": ("lora_rate", "lora"),
    "probe": ("probe",),
    "generative": ("gen_images", "gen_classifier", "gen_lr_grid", "gen_lr_run", "generative"),
    "scaling": ("scaling_tokens", "scaling_point", "scaling_cost_warm", "scaling_cost"),
    "saffu": ("saffu", "saffu_kn"),
    "rest": (),
}


def phases_arg(studies: dict[str, tuple[str, ...]] = STUDIES) -> str:
    """``name=rule ...;name=rule ...`` as gpu_readme_command.sh's PHASES reads it."""
    return ";".join(f"{name}={' '.join(rules)}" for name, rules in studies.items())


def read_power(path: str) -> list[tuple[float, float]]:
    """(seconds since the epoch, watts) per sample of nvidia-smi's log (every GPU's summed at one
    time stamp); lines that are not samples are skipped. nvidia-smi writes the host's local time,
    as ``date +%s`` reads it."""
    by_time: dict[float, float] = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            try:
                t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                watts = float(row[4].split()[0])
            except (ValueError, IndexError):
                continue
            by_time[t] = by_time.get(t, 0.0) + watts
    return sorted(by_time.items())


def energy(samples: list[tuple[float, float]], start: float, end: float) -> tuple[float, float]:
    """(joules, peak watts) over [start, end]: each sample's power held until the next sample."""
    joules, peak = 0.0, 0.0
    for (t, w), (t_next, _) in zip(samples, samples[1:] + [(end, 0.0)], strict=True):
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            joules += w * (hi - lo)
            peak = max(peak, w)
    return joules, peak


def finished_jobs(log: Path) -> int:
    """Jobs a Snakemake log says finished."""
    if not log.is_file():
        return 0
    return sum(
        line.startswith("Finished jobid") for line in log.read_text(errors="replace").splitlines()
    )


def read_phases(path: str) -> list[tuple[str, float, float, int]]:
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            name, start, end, rc = line.split("\t")
            rows.append((name, float(start), float(end), int(rc)))
    if not rows:
        raise SystemExit(f"{path}: no phase ran")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "files", nargs="*", help="phases.tsv gpu_util.csv | (--whole) t0 t1 gpu_util.csv"
    )
    ap.add_argument("--whole", action="store_true", help="one span: the build's t0 and t1 files")
    ap.add_argument("--logs", help="folder of the phases' Snakemake logs (snakemake.<phase>.log)")
    ap.add_argument("--studies", action="store_true", help="print PHASES: one phase per study")
    a = ap.parse_args()
    if a.studies:
        print(phases_arg())
        return
    if len(a.files) != (3 if a.whole else 2):
        ap.error("give phases.tsv and gpu_util.csv, or with --whole: t0, t1 and gpu_util.csv")
    if a.whole:
        t0, t1, power = a.files
        phases = [("whole", float(Path(t0).read_text()), float(Path(t1).read_text()), 0)]
    else:
        table, power = a.files
        phases = read_phases(table)
    samples = read_power(power)
    if not samples:
        raise SystemExit(f"no nvidia-smi samples in {power}")
    rows = []
    for name, start, end, rc in phases:
        joules, peak = energy(samples, start, end)
        jobs = finished_jobs(Path(a.logs) / f"snakemake.{name}.log") if a.logs else None
        rows.append((name, end - start, jobs, joules, peak, rc))
    wall = sum(r[1] for r in rows)
    total = sum(r[3] for r in rows)
    mean_w = total / wall
    print(f"{'phase':12s} {'wall s':>7s} {'jobs':>5s} {'mean W':>6s} {'peak W':>6s} {'kJ':>7s} "
          f"{'share':>6s} {'s at mean W':>11s} rc")  # fmt: skip
    for name, secs, jobs, joules, peak, rc in rows:
        print(f"{name:12s} {secs:7.1f} {'-' if jobs is None else jobs:>5} {joules / secs:6.0f} "
              f"{peak:6.0f} {joules / 1e3:7.1f} {joules / total:6.1%} {joules / mean_w:11.1f} {rc}")  # fmt: skip
    if len(rows) > 1:
        print(f"{'sum':12s} {wall:7.1f} {'':>5s} {mean_w:6.0f} {'':>6s} {total / 1e3:7.1f}")


if __name__ == "__main__":
    main()
