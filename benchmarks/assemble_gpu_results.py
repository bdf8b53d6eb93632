"""Build a config's report on this machine from results a GPU host sent back without its bulk.

The GPU host returns ``results/<name>/`` without checkpoints, image arrays and sample grids (too
large to send). Snakemake would rerun every job that made them. This script, run after the
results are unpacked with their times (``tar xzf``), finds each job that Snakemake would rerun
only because such a file is missing while the job's other outputs are there, and puts an empty
stand-in file in its place, dated like the job's other outputs. Then
``snakemake --rerun-triggers mtime`` builds what is left (CPU-side jobs, aggregation, tables,
the PDF). Snakemake then treats the stand-ins as made, so a CPU-side job that still has to run
and reads one gets an empty file: a sample-grid figure is left blank, a job that loads a
checkpoint fails loudly (rerun its producer on a GPU). ``--remove`` deletes the stand-ins afterwards (they are listed in
``results/<name>/standins.txt``).

    python benchmarks/assemble_gpu_results.py --configfile config/config.yaml [--config ...]
    snakemake --cores all --configfile config/config.yaml --rerun-triggers mtime
    python benchmarks/assemble_gpu_results.py --configfile config/config.yaml --remove
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

BULK = re.compile(r"\.(pt|npz|npy|png)$")  # what the GPU host leaves behind


def dry_run(args: argparse.Namespace) -> str:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--rerun-triggers", "mtime",
           "--configfile", *args.configfile]  # fmt: skip
    if args.config:
        cmd += ["--config", *args.config]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:  # else a failed plan would read as "nothing to stand in for"
        raise SystemExit(f"snakemake -n failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def jobs(text: str):
    """(rule, outputs, missing outputs) of every planned job."""
    for block in re.split(r"\n(?=\[\w{3} \w{3} )", text):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        out = re.search(r"^\s+output: (.*)$", block, re.M)
        reason = re.search(r"^\s+reason: Missing output files: ([^;\n]*)", block, re.M)
        if rule and out and reason:
            yield rule.group(1), out.group(1).split(", "), reason.group(1).split(", ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", nargs="+", default=["config/config.yaml"])
    ap.add_argument("--config", nargs="+")
    ap.add_argument("--name", default="paper")
    ap.add_argument("--remove", action="store_true")
    args = ap.parse_args()
    listing = Path(f"results/{args.name}/standins.txt")
    if args.remove:
        for p in listing.read_text().split() if listing.exists() else []:
            Path(p).unlink(missing_ok=True)
        listing.unlink(missing_ok=True)
        return
    made: list[str] = listing.read_text().split() if listing.exists() else []
    for _ in range(10):  # a stand-in can reveal the next job up the chain
        new = 0
        for rule, outputs, missing in jobs(dry_run(args)):
            present = [p for p in outputs if Path(p).exists()]
            # every absent output, not only those the reason lists (the ones a job needs)
            absent = [p for p in outputs if p not in present]
            if not present or not all(BULK.search(p) for p in absent):
                continue  # nothing of this job came back, or it lacks a real result: it runs
            stamp = min(Path(p).stat().st_mtime for p in present)
            for m in missing:
                Path(m).parent.mkdir(parents=True, exist_ok=True)
                Path(m).touch()
                os.utime(m, (stamp, stamp))
                made.append(m)
                new += 1
            print(f"{rule}: {len(missing)} stand-in(s), e.g. {missing[0]}")
        if not new:
            break
    listing.write_text("".join(f"{p}\n" for p in made))
    print(f"{len(made)} stand-ins, listed in {listing}")


if __name__ == "__main__":
    main()
