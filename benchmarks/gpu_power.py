"""What the GPU did during a run, window by window: busy share, memory held and power drawn.

Reads the nvidia-smi log that ``gpu_run.sh`` writes (``gpu_util.csv``: one line a second and a
GPU, ``--query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm``) and prints,
per window and GPU, the means of each column. "Busy" only says that some kernel ran in the
sample period; the power draw against the card's limit says whether the GPU did full work
(an H100 drew 549-682 W of its 700 W through a whole paper build) or ran small kernels.

    python benchmarks/gpu_power.py gpu_util.csv --window 30
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from datetime import datetime

FIELDS = ("util_pct", "mem_gb", "power_w", "sm_mhz")


def read_samples(path: str) -> list[tuple[float, str, tuple[float, ...]]]:
    """(seconds since the first sample, GPU index, (busy %, memory GB, power W, SM MHz)) per line;
    lines that are not samples (a restarted logger's header, a driver message) are skipped."""
    out, t0 = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            try:
                t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                util, mem, power, sm = (float(v.split()[0]) for v in row[2:6])
            except (ValueError, IndexError):
                continue
            t0 = t0 or t
            out.append(((t - t0).total_seconds(), row[1].strip(), (util, mem / 1024, power, sm)))
    return out


def windows(samples, width: float) -> dict[tuple[int, str], tuple[float, ...]]:
    """Mean of each column per (window start in seconds, GPU)."""
    acc: dict[tuple[int, str], list] = defaultdict(list)
    for t, gpu, values in samples:
        acc[(int(t // width * width), gpu)].append(values)
    return {k: tuple(sum(col) / len(v) for col in zip(*v, strict=True)) for k, v in acc.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="nvidia-smi's log (gpu_util.csv)")
    ap.add_argument("--window", type=float, default=30.0, help="seconds per window")
    a = ap.parse_args()
    samples = read_samples(a.csv)
    if not samples:
        raise SystemExit(f"no nvidia-smi samples in {a.csv}")
    print(
        f"{'from s':>6s} {'GPU':>3s} {'busy %':>6s} {'mem GB':>6s} {'power W':>7s} {'SM MHz':>6s}"
    )
    for (start, gpu), (util, mem, power, sm) in sorted(windows(samples, a.window).items()):
        print(f"{start:6d} {gpu:>3s} {util:6.0f} {mem:6.1f} {power:7.0f} {sm:6.0f}")


if __name__ == "__main__":
    main()
