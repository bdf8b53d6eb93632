"""Per-rule seconds of a finished run, and the reference records the planner's estimate reads.

A run's seconds come from its Snakemake log (each job's start and finish stamps, 1 s resolution)
and, where a rule declares ``benchmark:``, from its tsv files (measured per job, preferred).
``python -m pillm.timings --log <snakemake log> [--benchmarks <folder>] --config <name>
--device cpu|cuda --cores N [--gpus N] --source <text> [--add [--rules R ...]]`` writes one
record of ``benchmarks/estimates.json``; ``--add`` adds the log's rules to the record already
there (a rule run on its own, e.g. ``mirror``, which no build target asks for), ``--rules`` only
those of the log's rules. Torch-free.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

ESTIMATES = Path(__file__).resolve().parents[2] / "benchmarks" / "estimates.json"
TARGET_RULE = "all"  # the workflow's target rule: Snakemake logs it, but it runs no job


_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def parse_log(text: str) -> dict[str, list[float]]:
    """Seconds per finished job, by rule, from a Snakemake log (start and finish stamps)."""
    started: dict[str, tuple[str, datetime]] = {}
    done: dict[str, list[float]] = {}
    stamp: datetime | None = None
    rule: str | None = None
    for line in text.splitlines():
        m = _STAMP.match(line.strip())
        if m:
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
            continue
        s = line.strip()
        if re.match(r"^(local)?rule \w+:$", s):
            rule = s.split()[-1].rstrip(":")
        elif s.startswith("jobid:") and rule and stamp:
            started[s.split()[1]] = (rule, stamp)
            rule = None
        elif s.startswith("Finished jobid:") and stamp:
            job = s.split()[2]
            if job in started:
                name, t0 = started.pop(job)
                done.setdefault(name, []).append((stamp - t0).total_seconds())
    return done


def _bench_rule(rel: Path) -> str:
    """The rule of a benchmark file from its path (workflow/rules/*.smk ``benchfile(...)``)."""
    if rel.parts[0] == "generative" and len(rel.parts) == 3:  # generative/<dataset>/<file>
        if rel.stem == "classifier":
            return "gen_classifier"
        if rel.stem.startswith("lr_"):
            return "gen_lr_grid"  # a whole grid in one job (older benchmark records)
    if rel.parts[0] == "generative" and len(rel.parts) == 4 and rel.parts[2].startswith("lr_"):
        return "gen_lr_run"  # generative/<dataset>/lr_<family>/lr<rate>
    return rel.parts[0]


def read_benchmark_rows(folder: str | Path) -> list[dict[str, Any]]:
    """One row per job of a run's ``benchmark:`` tsv files: its rule, file, wall seconds (``s``)
    and CPU seconds (``cpu_time``, the job's processes together; Snakemake samples it)."""
    out = []
    folder = Path(folder)
    for tsv in sorted(folder.rglob("*.tsv")):
        with tsv.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if rows:
            rel = tsv.relative_to(folder)
            last = rows[-1]
            out.append({"rule": _bench_rule(rel), "file": str(rel), "s": float(last["s"]),
                        "cpu_time": float(last.get("cpu_time") or "nan")})  # fmt: skip
    return out


def read_benchmarks(folder: str | Path) -> dict[str, list[float]]:
    """Seconds per job, by rule, from the ``benchmark:`` tsv files of a run."""
    out: dict[str, list[float]] = {}
    for row in read_benchmark_rows(folder):
        out.setdefault(row["rule"], []).append(row["s"])
    return out


def summarise(seconds: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        r: {"jobs": len(v), "mean_s": round(sum(v) / len(v), 1)} for r, v in sorted(seconds.items())
    }


def load_estimates(path: Path = ESTIMATES) -> dict[str, Any]:
    if not path.is_file():
        return {"records": []}
    return json.loads(path.read_text())


def log_span(text: str) -> float:
    """Seconds from the first to the last time stamp of a Snakemake log."""
    stamps = [
        datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        for m in (_STAMP.match(line.strip()) for line in text.splitlines())
        if m
    ]
    return (stamps[-1] - stamps[0]).total_seconds() if stamps else 0.0


def derive(
    log: str, benchmarks: str | None, config: str, device: str, source: str, cores: int,
    gpus: int = 0, out: Path = ESTIMATES, add: bool = False, rules: list[str] | None = None,
) -> None:  # fmt: skip
    """Write one record of per-rule seconds into ``out`` (benchmarks/estimates.json), every job
    rule of the log included; its ``parallel`` is the run's job seconds over its wall time (how
    many jobs ran at once), with the ``cores`` and ``gpus`` the run had (the estimate scales by
    them). ``add``: the log's rules join the record of this config and device already there,
    whose parallel, cores and gpus stay (its source gains ``source``); else it replaces it.
    ``rules`` (with ``add``): only these rules of the log join it (a build of part of the DAG
    measures a new rule without replacing the others' figures from a whole build)."""
    opener = gzip.open if log.endswith(".gz") else open
    with opener(log, "rt") as f:
        text = f.read()
    seconds = parse_log(text)
    seconds.pop(TARGET_RULE, None)
    parallel = round(sum(map(sum, seconds.values())) / max(log_span(text), 1.0), 2)
    if benchmarks:
        seconds.update(read_benchmarks(benchmarks))  # measured per job beats log stamps
    if rules:
        if not add:
            raise SystemExit("--rules picks the rules that --add adds: pass --add")
        missing = sorted(set(rules) - set(seconds))
        if missing:
            raise SystemExit(f"--rules {missing}: no job of theirs in {log}")
        seconds = {r: seconds[r] for r in rules}
    est = load_estimates(out)
    old = [r for r in est["records"] if (r["config"], r["device"]) == (config, device)]
    recs = [r for r in est["records"] if (r["config"], r["device"]) != (config, device)]
    rec = {"config": config, "device": device, "parallel": parallel, "source": source,
           "cores": cores, "gpus": gpus, "rules": summarise(seconds)}  # fmt: skip
    if add:
        if not old:
            raise SystemExit(f"--add: no record of config {config!r} on {device} in {out}")
        rec = {**old[0], "source": f"{old[0]['source']}; {source}",
               "rules": {**old[0]["rules"], **rec["rules"]}}  # fmt: skip
    recs.append(rec)
    est["records"] = sorted(recs, key=lambda r: (r["config"], r["device"]))
    out.write_text(json.dumps(est, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=derive.__doc__)
    p.add_argument("--log", required=True)
    p.add_argument("--benchmarks")
    p.add_argument("--config", required=True)
    p.add_argument("--device", required=True, choices=["cpu", "cuda"])
    p.add_argument("--source", required=True)
    p.add_argument("--cores", type=int, required=True, help="cores the recorded run had")
    p.add_argument("--gpus", type=int, default=0, help="GPUs the recorded run had")
    p.add_argument("--add", action="store_true", help="add the log's rules to the record there")
    p.add_argument("--rules", nargs="+", help="with --add: only these rules of the log")
    a = p.parse_args()
    derive(a.log, a.benchmarks, a.config, a.device, a.source, a.cores, a.gpus, add=a.add,
           rules=a.rules)  # fmt: skip
