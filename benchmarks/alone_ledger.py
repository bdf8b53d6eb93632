"""GPU work of the paper DAG's jobs, measured alone: how long each job kept the GPU busy.

    python benchmarks/alone_ledger.py RUN_DIR [RUN_DIR ...] [--shared DAG/timeline.tsv]

Each RUN_DIR is one ``gpu_run.sh`` call with ``GPU_JOBS=1`` (one GPU job at a time, no MPS),
holding its ``snakemake.log`` (each job's start and end, read by ``dag_timeline.parse``) and
``gpu_util.csv`` (nvidia-smi's busy share each second). A job's busy seconds are the busy
shares summed over its wall, its mean power over the same samples: with one job on the GPU
they are that job's (the CPU-only jobs that may run beside it use no GPU). Busy means some
kernel ran, so busy seconds bound a job's GPU work from above; a job alone below 100 % busy
left the GPU idle while its host side ran.

``--shared``: a whole DAG's timeline (e.g. the MPS build on one GPU). Its jobs are matched to
the measured jobs of their family (the output path with a seed > 0 and the grid rate
wildcarded: later seeds of one arm do the same work, the first seed may also search rates), or
failing that to their arm's first seed (a later seed's work without a search: an upper bound),
and each rule's busy seconds are summed over its matched jobs. An unmatched job is counted, and
given its rule's mean over the measured jobs in a separate column (an estimate, marked so).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dag_timeline import parse, read_tsv

SEED = re.compile(r"/seed([1-9]\d*)/")
RATE = re.compile(r"/lr[0-9.e+-]+(?=\.json$|_|/)")


@dataclass
class Measured:
    rule: str
    output: str
    wall: float
    busy: float  # GPU busy seconds over the job's wall
    watts: float  # mean power draw over the job's wall


def family(output: str) -> str:
    """The output path with a later seed and a grid rate wildcarded."""
    return RATE.sub("/lr*", SEED.sub("/seed>0/", output))


def seed_zero(output: str) -> str:
    """The family of the same arm's first seed."""
    return family(SEED.sub("/seed0/", output))


def samples(path: Path) -> list[tuple[datetime, float, float]]:
    """(time, busy share 0-1, watts) of each line of an nvidia-smi ``gpu_util.csv``
    (timestamp, index, utilization.gpu, memory.used, power.draw, clocks.sm)."""
    out = []
    with path.open() as f:
        for row in csv.reader(f):
            if len(row) < 5 or "%" not in row[2]:
                continue
            t = datetime.strptime(row[0].strip().split(".")[0], "%Y/%m/%d %H:%M:%S")
            out.append((t, float(row[2].split()[0]) / 100, float(row[4].split()[0])))
    return out


def measure(run: Path) -> list[Measured]:
    """Every finished job of one alone run with its wall, busy seconds and mean power."""
    util = samples(run / "gpu_util.csv")
    out = []
    jobs, _ = parse(str(run / "snakemake.log"), 1, grace=0.0)
    for job in sorted(jobs, key=lambda j: j.start):
        if job.status != "done" or job.end is None or job.started_at is None:
            continue
        t0 = job.started_at
        inside = [(busy, w) for t, busy, w in util
                  if 0 <= (t - t0).total_seconds() < job.end - job.start]  # fmt: skip
        watts = statistics.fmean(w for _, w in inside) if inside else float("nan")
        out.append(Measured(job.rule, job.output, job.end - job.start,
                            sum(b for b, _ in inside), watts))  # fmt: skip
    return out


def extrapolate(measured: list[Measured], shared: Path) -> list[dict]:
    """Per rule of the shared timeline: its jobs, those with a measured family, their alone
    busy seconds (each job the mean of its family's measurements) and their shared walls."""
    by_family: dict[str, list[Measured]] = {}
    by_rule: dict[str, list[float]] = {}
    for m in measured:
        by_family.setdefault(family(m.output), []).append(m)
        by_rule.setdefault(m.rule, []).append(m.busy)
    rules: dict[str, dict] = {}
    for row in read_tsv(shared):
        r = rules.setdefault(row["rule"], {"rule": row["rule"], "jobs": 0, "matched": 0,
                                           "via_seed0": 0, "busy": 0.0, "alone_wall": 0.0,
                                           "shared_wall": 0.0, "estimated": 0.0})  # fmt: skip
        r["jobs"] += 1
        if row["end"] is not None:  # a job still running when the build stopped has no wall
            r["shared_wall"] += row["end"] - row["start"]
        ms = by_family.get(family(row["output"]))
        if not ms and (ms := by_family.get(seed_zero(row["output"]))):
            r["via_seed0"] += 1
        if ms:
            r["matched"] += 1
            r["busy"] += statistics.fmean(m.busy for m in ms)
            r["alone_wall"] += statistics.fmean(m.wall for m in ms)
        elif row["rule"] in by_rule:
            r["estimated"] += statistics.fmean(by_rule[row["rule"]])
    return sorted(rules.values(), key=lambda r: -r["busy"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="alone gpu_run.sh output folders")
    ap.add_argument("--shared", type=Path, help="a whole DAG's timeline.tsv to extrapolate over")
    args = ap.parse_args()
    measured = [m for run in args.runs for m in measure(run)]
    print("| rule | output | alone wall s | GPU busy s | busy % | mean W |")
    print("|---|---|---|---|---|---|")
    for m in measured:
        share = 100 * m.busy / m.wall if m.wall else float("nan")
        print(f"| {m.rule} | {m.output} | {m.wall:.0f} | {m.busy:.1f} | {share:.0f} | "
              f"{m.watts:.0f} |")  # fmt: skip
    wall, busy = sum(m.wall for m in measured), sum(m.busy for m in measured)
    print(f"\n{len(measured)} jobs alone: {wall:.0f} s of wall, {busy:.1f} GPU-busy s "
          f"({100 * busy / wall:.0f} %)")  # fmt: skip
    if args.shared:
        rows = extrapolate(measured, args.shared)
        print(f"\nover {args.shared}'s jobs (each matched job: its family's alone mean):")
        print("| rule | jobs | matched (by seed 0) | alone busy s | alone wall s | "
              "unmatched: rule mean x jobs (estimate) | shared wall s (all jobs) |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['rule']} | {r['jobs']} | {r['matched']} ({r['via_seed0']}) | "
                  f"{r['busy']:.0f} | {r['alone_wall']:.0f} | {r['estimated']:.0f} | "
                  f"{r['shared_wall']:.0f} |")  # fmt: skip
        jobs, matched = sum(r["jobs"] for r in rows), sum(r["matched"] for r in rows)
        busy, est = sum(r["busy"] for r in rows), sum(r["estimated"] for r in rows)
        print(f"\n{matched} of {jobs} jobs matched: {busy:.0f} GPU-busy s alone, "
              f"{sum(r['alone_wall'] for r in rows):.0f} s of alone wall; with the unmatched jobs "
              f"of measured rules estimated: {busy + est:.0f} GPU-busy s")  # fmt: skip


if __name__ == "__main__":
    main()
