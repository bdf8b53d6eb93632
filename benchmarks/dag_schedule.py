"""Replay Snakemake's greedy scheduler over a build's DAG with the walls its jobs took: would
other priorities (or more slots) end the build sooner, and what bounds its wall time?

Inputs: the jobs of a dry run (``snakemake -n ... > dry.txt``: each job's rule, input, output,
priority, threads and resources) and a build's ``timeline.tsv`` (``dag_timeline.py --tsv``:
each job's start and end). Each job keeps the wall it took there (jobs it lacks, such as code
stamps, take none). The replay starts, whenever a job ends, the ready jobs in decreasing
priority while the GPU slots (``gpu``), the declared GPU memory (``gpu_mem_mb``) and the cores
last, skipping those that do not fit, as Snakemake's greedy scheduler does with greediness 1
(ties: the dry run's order, where Snakemake compares input sizes).

Two bounds come with it: the GPU jobs' walls summed over the slots (no order beats it while
the walls stay as measured) and the longest chain of dependent jobs. Walls measured in a full
build are walls under that build's sharing: a replay that moves jobs changes who shares with
whom, so it says what an order gains at those walls, not what the GPU would do.

    python benchmarks/dag_schedule.py dry.txt timeline.tsv --gpus 14 --gpu-mem-mb 136582 \
        --cores 30 --priority run_lm=7
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from dag_timeline import read_tsv


@dataclass
class Job:
    rule: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    priority: float = 0.0
    threads: int = 1
    resources: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    @property
    def gpu(self) -> float:
        return self.resources.get("gpu", 0.0)

    @property
    def gpu_mem(self) -> float:
        return self.resources.get("gpu_mem_mb", 0.0) if self.gpu else 0.0


def read_dry_run(path: Path) -> list[Job]:
    """The job blocks of ``snakemake -n`` output."""
    jobs: list[Job] = []
    for line in path.read_text().splitlines():
        head = re.match(r"^(?:local)?rule (\w+):$", line)
        if head:
            jobs.append(Job(head[1]))
            continue
        if not jobs or not line.startswith("    "):
            continue
        key, _, value = line.strip().partition(": ")
        job = jobs[-1]
        if key == "input":
            job.inputs = [x.strip() for x in value.split(",") if x.strip()]
        elif key == "output":
            job.outputs = [x.strip() for x in value.split(",") if x.strip()]
        elif key == "priority":
            job.priority = float(value)
        elif key == "threads":
            job.threads = int(value)
        elif key == "resources":
            for item in value.split(","):
                name, _, amount = item.strip().partition("=")
                if amount.replace(".", "", 1).isdigit():  # not tmpdir=/tmp and the like
                    job.resources[name] = float(amount)
    return jobs


def add_walls(jobs: list[Job], timeline: Path) -> int:
    """Each job's wall from the timeline (matched by an output); returns how many matched."""
    walls = {r["output"]: r["end"] - r["start"] for r in read_tsv(timeline) if r["end"] is not None}
    matched = 0
    for job in jobs:
        hit = next((walls[o] for o in job.outputs if o in walls), None)
        if hit is not None:
            job.wall, matched = hit, matched + 1
    return matched


def dependencies(jobs: list[Job]) -> list[set[int]]:
    producer = {o: i for i, job in enumerate(jobs) for o in job.outputs}
    return [{producer[x] for x in job.inputs if x in producer} for job in jobs]


def replay(jobs: list[Job], gpus: float, gpu_mem: float, cores: int,
           priority: dict[str, float] | None = None) -> tuple[float, list[float]]:  # fmt: skip
    """(end, each job's start) of the greedy schedule; ``priority``: rule -> priority."""
    prio = [(priority or {}).get(job.rule, job.priority) for job in jobs]
    need = [(job.gpu, job.gpu_mem, job.threads) for job in jobs]  # what a job holds while it runs
    deps = dependencies(jobs)
    done: set[int] = set()
    running: dict[int, float] = {}  # job -> end
    start = [0.0] * len(jobs)
    free = [gpus, gpu_mem, cores]
    now = 0.0
    while len(done) < len(jobs):
        ready = [i for i in range(len(jobs))
                 if i not in done and i not in running and deps[i] <= done]  # fmt: skip
        for i in sorted(ready, key=lambda i: -prio[i]):  # stable: the dry run's order on ties
            if all(n <= f for n, f in zip(need[i], free, strict=True)):
                free = [f - n for f, n in zip(free, need[i], strict=True)]
                running[i], start[i] = now + jobs[i].wall, now
        if not running:
            raise ValueError("no job can start: a job needs more than the resources given")
        now = min(running.values())
        for i in [i for i, end in running.items() if end <= now]:
            del running[i]
            done.add(i)
            free = [f + n for f, n in zip(free, need[i], strict=True)]
    return now, start


def critical_path(jobs: list[Job]) -> float:
    """The longest chain of dependent jobs, by wall."""
    deps = dependencies(jobs)
    finish: dict[int, float] = {}

    def end(i: int) -> float:
        if i not in finish:
            finish[i] = jobs[i].wall + max((end(d) for d in deps[i]), default=0.0)
        return finish[i]

    return max((end(i) for i in range(len(jobs))), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dry_run", type=Path, help="snakemake -n output")
    ap.add_argument("timeline", type=Path, help="dag_timeline.py --tsv output")
    ap.add_argument("--gpus", type=float, default=14, help="the gpu resource (GPU_JOBS)")
    ap.add_argument("--gpu-mem-mb", type=float, default=float("inf"))
    ap.add_argument("--cores", type=int, default=30)
    ap.add_argument("--priority", action="append", default=[], metavar="RULE=P",
                    help="another priority for every job of a rule; repeatable")  # fmt: skip
    args = ap.parse_args()
    jobs = read_dry_run(args.dry_run)
    matched = add_walls(jobs, args.timeline)
    overrides = {}
    for item in args.priority:
        rule, _, value = item.partition("=")
        if rule not in {job.rule for job in jobs}:
            raise SystemExit(f"--priority {item}: no job of rule {rule!r} in {args.dry_run}")
        overrides[rule] = float(value)
    gpu_walls = sum(job.wall for job in jobs if job.gpu)
    end, _ = replay(jobs, args.gpus, args.gpu_mem_mb, args.cores)
    print(f"{len(jobs)} jobs, {matched} with a measured wall; GPU jobs' walls {gpu_walls:.0f} s")
    print(f"replayed at the dry run's priorities: {end:.0f} s")
    if overrides:
        end2, _ = replay(jobs, args.gpus, args.gpu_mem_mb, args.cores, overrides)
        print(f"replayed with {', '.join(args.priority)}: {end2:.0f} s")
    print(f"bounds: the GPU jobs' walls over {args.gpus:g} slots {gpu_walls / args.gpus:.0f} s; "
          f"the longest chain of dependent jobs {critical_path(jobs):.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
