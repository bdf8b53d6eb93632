"""Which jobs of a GPU build kept the GPU busy: nvidia-smi pmon samples summed per job and rule.

``benchmarks/gpu_run.sh`` logs, beside the build, ``nvidia-smi pmon -s u -d 1`` (each second, per
process: the share of the last second in which one of its kernels ran, ``sm``, and in which
device memory was read or written, ``mem``) and the command line of every pillm process
(``pids.txt``: "pid args"). This joins them: each process is the job whose output the command
names (``--out``, ``--out-dir``, ``--out-dirs``, ``--run-dirs``) and whose rule its pillm command
names, and a rule's busy seconds are the sum of its processes' sm% / 100 over the samples.

Jobs that share the GPU run kernels at the same time, so the busy seconds of all jobs add up to
more than the build's wall time: they say how long each job had kernels on the device, not what
share of the device's throughput it used. Whether pmon sees MPS clients at all depends on the
driver; a pmon log of the MPS server alone is reported as such.

    python benchmarks/gpu_share.py --pmon pmon.txt --pids pids.txt --timeline timeline.tsv
"""

from __future__ import annotations

import argparse
import shlex
from collections import defaultdict
from pathlib import Path

from dag_timeline import read_tsv

OUT_FLAGS = ("--out", "--out-dir", "--out-dirs", "--run-dirs")


def read_pmon(path: Path) -> dict[int, list[tuple[float, float]]]:
    """pid -> [(sm %, mem %)] per sample that has a value ('-' rows are skipped)."""
    columns: list[str] = []
    samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            if "pid" in line.split():  # the header row names the columns ("#Time gpu pid ...")
                columns = line.lstrip("#").split()
            continue
        fields = line.split()
        if not columns or len(fields) < len(columns) or not fields[columns.index("pid")].isdigit():
            continue
        row = dict(zip(columns, fields, strict=False))  # the command name may hold spaces
        if not row.get("sm", "-").replace(".", "", 1).isdigit():
            continue  # '-': no sample of this process (every MPS client's, driver 580)
        mem = row.get("mem", "-")
        samples[int(row["pid"])].append((float(row["sm"]), float(mem) if mem != "-" else 0.0))
    return samples


def read_pids(path: Path) -> dict[int, list[str]]:
    """pid -> its command line's arguments (the first line seen for each pid)."""
    out: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit() and int(pid) not in out:
            try:
                out[int(pid)] = shlex.split(args)
            except ValueError:  # an unbalanced quote in a cut-off line
                out[int(pid)] = args.split()
    return out


def read_timeline(path: Path) -> list[tuple[str, str]]:
    """(rule, first output) of every job of ``dag_timeline.py --tsv``."""
    return [(r["rule"], r["output"]) for r in read_tsv(path)]


def job_of(args: list[str], jobs: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The timeline job a pillm process ran: the one whose output lies under the path after an
    output flag, of the rule its command names (``run-lm`` -> run_lm) where several match."""
    if "pillm" not in args:
        return None
    command = args[args.index("pillm") + 1] if args.index("pillm") + 1 < len(args) else ""
    outs = [args[i + 1] for i, a in enumerate(args[:-1]) if a in OUT_FLAGS]
    hits = [j for j in jobs for o in outs if j[1] == o or j[1].startswith(o.rstrip("/") + "/")]
    if len(hits) > 1:
        hits = [j for j in hits if j[0] == command.replace("-", "_")] or hits[:1]
    return hits[0] if hits else None


def processes(pmon: Path, pids: Path, timeline: Path) -> list[tuple[int, tuple | None, list]]:
    """Each sampled process: (pid, the timeline job it ran or None, its (sm, mem) samples)."""
    samples, commands, jobs = read_pmon(pmon), read_pids(pids), read_timeline(timeline)
    return [(pid, job_of(commands.get(pid, []), jobs), rows) for pid, rows in samples.items()]


def tally(procs: list[tuple[int, tuple | None, list]]) -> tuple[dict, dict, int]:
    """Per rule and per job: [processes, samples, sm seconds, mem seconds]; and the samples of
    processes no job claims (the MPS server, other programs)."""
    by_rule: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    by_job: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    unclaimed = 0
    for _, job, rows in procs:
        if job is None:
            unclaimed += len(rows)
            continue
        for acc in (by_rule[job[0]], by_job[job]):
            acc[0] += 1
            acc[1] += len(rows)
            acc[2] += sum(sm for sm, _ in rows) / 100
            acc[3] += sum(mem for _, mem in rows) / 100
    return dict(by_rule), dict(by_job), unclaimed


def shares(pmon: Path, pids: Path, timeline: Path) -> tuple[dict, dict, int]:
    """``tally`` of the logs' processes."""
    return tally(processes(pmon, pids, timeline))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pmon", type=Path, required=True)
    ap.add_argument("--pids", type=Path, required=True)
    ap.add_argument("--timeline", type=Path, required=True)
    ap.add_argument("--top", type=int, default=15, help="jobs listed, most busy first")
    args = ap.parse_args()
    procs = processes(args.pmon, args.pids, args.timeline)
    by_rule, by_job, unclaimed = tally(procs)
    if by_rule:
        total_sm = sum(v[2] for v in by_rule.values()) or 1.0
        total_mem = sum(v[3] for v in by_rule.values()) or 1.0
        print(f"{'rule':18s} {'procs':>5s} {'samples':>7s} {'sm s':>8s} {'sm %':>6s} "
              f"{'mem s':>8s} {'mem %':>6s}")  # fmt: skip
        for rule, (n, k, sm, mem) in sorted(by_rule.items(), key=lambda kv: -kv[1][2]):
            print(f"{rule:18s} {n:5d} {k:7d} {sm:8.1f} {100 * sm / total_sm:6.1f} "
                  f"{mem:8.1f} {100 * mem / total_mem:6.1f}")  # fmt: skip
        print(f"samples of processes no job claims: {unclaimed}")
        claimed = sum(v[1] for v in by_rule.values())
        if unclaimed > claimed:  # e.g. a job's first second before it joined MPS
            print(f"most samples are of processes no job claims ({unclaimed} against {claimed}): "
                  "under MPS pmon measures the MPS server, so the jobs' figures above and "
                  "below cover only their samples outside it")  # fmt: skip
    else:  # under MPS (driver 580, 2026-11-28) pmon samples only the MPS server
        print(f"no pillm process has a value in pmon's samples; {unclaimed} samples of other "
              "processes (under MPS pmon measures the MPS server, not its clients):")  # fmt: skip
    for pid, job, rows in procs:
        if job is None:  # the MPS server, other programs: their mean busy shares
            sm, mem = (sum(r[i] for r in rows) / len(rows) for i in (0, 1))
            print(f"  pid {pid}: {len(rows)} samples, sm {sm:.1f} % and mem {mem:.1f} % on average")
    if not by_rule:
        return
    print(f"\nthe {args.top} jobs with the most sm seconds:")
    for (rule, out), (_, k, sm, mem) in sorted(by_job.items(), key=lambda kv: -kv[1][2])[
        : args.top
    ]:
        print(f"{sm:8.1f} sm s {mem:8.1f} mem s {k:5d} samples  {rule}  {out}")


if __name__ == "__main__":
    main()
