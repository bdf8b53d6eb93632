"""Where a run's CPU went: per rule, its jobs' wall and CPU seconds from their ``benchmark:`` files.

A GPU job that waits for a shared GPU can hold a core the whole time (CUDA spins by default:
``pillm.accel.cuda_driver``); CPU seconds per wall second tell a job that spins or computes on the
CPU from one that sleeps. With ``--cores`` the run's mean CPU demand is also given against them
(``--wall``: the run's wall seconds, e.g. from ``dag_timeline.py``).

    python benchmarks/job_cpu.py results/paper/benchmarks --wall 469 --cores 16
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from pillm.timings import read_benchmark_rows


def by_rule(folder: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for row in read_benchmark_rows(folder):
        rule = out[row["rule"]]
        rule["jobs"] += 1
        rule["wall_s"] += row["s"]
        rule["cpu_s"] += row["cpu_time"]
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a run's benchmark folder (results/<config>/benchmarks)")
    ap.add_argument("--wall", type=float, help="the run's wall seconds")
    ap.add_argument("--cores", type=int, help="the host's cores the run had")
    a = ap.parse_args()
    rules = by_rule(a.folder)
    if not rules:
        raise SystemExit(f"no benchmark .tsv files under {a.folder}")
    print(f"{'rule':16s} {'jobs':>4s} {'wall s':>8s} {'CPU s':>8s} {'CPU/wall':>8s}")
    for name, r in sorted(rules.items(), key=lambda kv: -kv[1]["cpu_s"]):
        ratio = r["cpu_s"] / r["wall_s"] if r["wall_s"] else float("nan")
        print(f"{name:16s} {r['jobs']:4d} {r['wall_s']:8.0f} {r['cpu_s']:8.0f} {ratio:8.2f}")
    wall = sum(r["wall_s"] for r in rules.values())
    cpu = sum(r["cpu_s"] for r in rules.values())
    print(f"{'all':16s} {sum(r['jobs'] for r in rules.values()):4.0f} {wall:8.0f} {cpu:8.0f} "
          f"{cpu / wall:8.2f}")  # fmt: skip
    if a.wall:
        cores = f" of {a.cores} cores" if a.cores else ""
        print(f"mean CPU demand over the run's {a.wall:.0f} s: {cpu / a.wall:.1f} cores{cores}")


if __name__ == "__main__":
    main()
