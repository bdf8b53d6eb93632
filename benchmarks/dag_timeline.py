"""Where a Snakemake run's wall time went: each job's start and end from the run's log.

Reads one or more Snakemake logs (plain or .gz), each one call of a run split over several calls
(``gpu_run.sh``'s SNAKE_TIMEOUT), in order. For each call: its span (first job start to last job
event), the jobs started, finished, failed and interrupted (an error within ``--grace`` seconds
of the call's last event is the interruption killing the job, an earlier one a failure), the
most jobs running at once and the time-averaged number running (jobs of every rule, the CPU-only
ones included). With ``--tsv`` every job's row
(call, rule, first output, start, end, status; seconds from the call's first job start); with
``--by-rule`` one line per rule: its jobs, the sum of their walls, the longest and when its last
job ended (under a shared GPU a job's wall is its share of the run, not its work alone).

    python benchmarks/dag_timeline.py logs/h100_call1.snakemake.log.gz logs/h100_call2.snakemake.log.gz
"""

from __future__ import annotations

import argparse
import csv
import gzip
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
OUTPUT = re.compile(r"^\s+output: (.*)$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")
ERROR = re.compile(r"^Error in rule (\w+)(?::|, jobid: (\d+))$")  # Snakemake 8 | 9


@dataclass
class Job:
    call: int
    rule: str
    output: str
    start: float
    end: float | None = None
    status: str = "running"  # done | failed | interrupted | running (still running at the end)
    started_at: datetime | None = None  # the log's clock at the start (to join other logs)


def _lines(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        return f.read().splitlines()


def parse(path: str, call: int, grace: float) -> tuple[list[Job], float]:
    """The jobs of one Snakemake log and the call's span in seconds (from its first job's start:
    Snakemake's own start-up, building the DAG, comes before and is not counted)."""
    jobs: dict[str, Job] = {}
    now: datetime | None = None
    t0: datetime | None = None
    last = 0.0
    pending: list[str] | None = None  # [rule, output] of a job block not yet given its jobid
    in_error = False
    errors: list[tuple[str, float]] = []

    def seconds() -> float:
        assert now is not None and t0 is not None
        return (now - t0).total_seconds()

    for line in _lines(path):
        if m := STAMP.match(line):
            now = datetime.strptime(m[1], "%a %b %d %H:%M:%S %Y")
            continue
        if m := RULE.match(line):
            pending, in_error = [m[1], ""], False
            continue
        if m := ERROR.match(line):
            pending, in_error = None, m[2] is None  # Snakemake 9 names the jobid on this line
            if m[2] is not None and t0 is not None:
                errors.append((m[2], seconds()))
            continue
        if pending is not None and (m := OUTPUT.match(line)):
            pending[1] = m[1].split(",")[0].strip()
            continue
        if m := JOBID.match(line):
            if in_error and t0 is not None:
                errors.append((m[1], seconds()))
                in_error = False
            elif pending is not None and now is not None:
                t0 = t0 or now
                jobs[m[1]] = Job(call, pending[0], pending[1], seconds(), started_at=now)
                pending = None
            continue
        if (m := FINISHED.match(line)) and m[1] in jobs:
            jobs[m[1]].end, jobs[m[1]].status = seconds(), "done"
            last = max(last, jobs[m[1]].end)
    last = max([last] + [t for _, t in errors])
    for jobid, t in errors:
        if jobid in jobs:
            jobs[jobid].end = t
            jobs[jobid].status = "interrupted" if t >= last - grace else "failed"
    return list(jobs.values()), last


def read_tsv(path: Path) -> list[dict]:
    """The job rows of ``--tsv`` output (files joined end to end: their repeated header lines
    skipped), each with its rule, output and status, and its start and end in seconds as floats
    (end None for a job still running)."""
    with Path(path).open() as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["call"] != "call"]
    return [{**r, "start": float(r["start_s"]), "end": float(r["end_s"]) if r["end_s"] else None}
            for r in rows]  # fmt: skip


def concurrency(jobs: list[Job], span: float) -> tuple[int, float]:
    """Most jobs running at once and the time-averaged number running over ``span``."""
    events = sorted([(j.start, 1) for j in jobs] + [(j.end if j.end is not None else span, -1)
                                                    for j in jobs])  # fmt: skip
    running, most, area, prev = 0, 0, 0.0, 0.0
    for t, step in events:
        area += running * (t - prev)
        running += step
        most = max(most, running)
        prev = t
    return most, area / span if span > 0 else 0.0


def summary(calls: list[tuple[list[Job], float]]) -> list[str]:
    out = []
    for i, (jobs, span) in enumerate(calls, 1):
        count = {s: sum(j.status == s for j in jobs) for s in
                 ("done", "failed", "interrupted", "running")}  # fmt: skip
        most, mean = concurrency(jobs, span)
        out.append(
            f"log {i}: {span:.0f} s, {len(jobs)} jobs started: {count['done']} done, "
            f"{count['failed']} failed, {count['interrupted']} interrupted, "
            f"{count['running']} still running; at most {most} at once, {mean:.1f} on average"
        )
    total = sum(span for _, span in calls)
    out.append(f"all logs: {total:.0f} s")
    return out


def by_rule(calls: list[tuple[list[Job], float]]) -> list[str]:
    """Per rule, most summed wall first: jobs, summed and longest wall, its last job's end
    (seconds from the first call's start; a job still running counts to its call's end)."""
    rules: dict[str, list[float]] = {}
    offset = 0.0
    for jobs, span in calls:
        for j in jobs:
            end = j.end if j.end is not None else span
            r = rules.setdefault(j.rule, [0, 0.0, 0.0, 0.0])
            r[0] += 1
            r[1] += end - j.start
            r[2] = max(r[2], end - j.start)
            r[3] = max(r[3], offset + end)
        offset += span
    width = max((len(n) for n in rules), default=4)
    out = [f"{'rule':<{width}}  jobs  sum of walls s  longest s  last end s"]
    for name, (n, total, longest, last) in sorted(rules.items(), key=lambda kv: -kv[1][1]):
        out.append(f"{name:<{width}}  {n:>4}  {total:>14.0f}  {longest:>9.0f}  {last:>10.0f}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", help="Snakemake logs, one per call, in order (.gz ok)")
    ap.add_argument("--grace", type=float, default=10.0,
                    help="an error this close to a call's end is the interruption (s)")  # fmt: skip
    ap.add_argument("--tsv", help="write every job's row here")
    ap.add_argument("--by-rule", action="store_true", help="also one line per rule")
    args = ap.parse_args(argv)
    calls = [parse(p, i, args.grace) for i, p in enumerate(args.logs, 1)]
    print("\n".join(summary(calls)))
    if args.by_rule:
        print("\n".join(by_rule(calls)))
    if args.tsv:
        rows = ["call\trule\toutput\tstart_s\tend_s\tstatus"]
        for jobs, _ in calls:
            for j in sorted(jobs, key=lambda j: j.start):
                end = "" if j.end is None else f"{j.end:.0f}"
                rows.append(f"{j.call}\t{j.rule}\t{j.output}\t{j.start:.0f}\t{end}\t{j.status}")
        Path(args.tsv).write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
