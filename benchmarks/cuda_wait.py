"""Benchmark: GPU jobs that spin while they wait, against jobs that sleep, on shared cores.

Each of ``--procs`` processes (pinned to the first ``--cores`` cores, as the DAG's jobs share a
host) repeats ``--iters`` times: queue ``--gpu-ms`` of GPU work (``torch.cuda._sleep``), wait for
it, then do ``--cpu-ms`` of Python work (a job's start-up, compilation and data preparation are
CPU work between GPU waits). Waiting spins a core under CUDA's default and sleeps under
``pillm.core.cuda_driver.sleep_while_waiting`` (the pipeline's GPU jobs since 2026-11-28).
Run it under MPS, as the DAG does, so the processes' GPU work overlaps rather than time-slices.
Prints, per process count and mode: the wall time from the loops' common start to the last
process's end (start-up is outside it), their CPU seconds in the loops, and the spin / sleep
wall ratio.

    python benchmarks/cuda_wait.py --procs 14 --procs 28 --cores 16 --out cuda_wait.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WORKER = """
import os, sys, time, torch
from pillm.core.cuda_driver import cuda_wait_mode
from pillm.core.runtime import resolve_device
os.sched_setaffinity(0, range({cores}))
device = resolve_device("cuda")
torch.zeros(1, device=device)
torch.cuda.synchronize()
cycles = int({gpu_ms} * torch.cuda.get_device_properties(0).clock_rate)  # kHz x ms
time.sleep(max(0.0, {start_at} - time.time()))  # all processes start the loop together
cpu0, t0 = time.process_time(), time.time()
for _ in range({iters}):
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    end = time.process_time() + {cpu_ms} / 1000
    while time.process_time() < end:  # CPU work, counted in this process's own CPU time
        pass
print(time.process_time() - cpu0, t0, time.time(), cuda_wait_mode(0))
"""


def run(procs: int, cores: int, iters: int, gpu_ms: float, cpu_ms: float, spin: bool) -> dict:
    # start-up (imports, CUDA context) is outside the clock: the loops start together
    start_at = time.time() + 10 + procs / 2
    code = WORKER.format(cores=cores, iters=iters, gpu_ms=gpu_ms, cpu_ms=cpu_ms, start_at=start_at)
    env = {**os.environ, "PILLM_CUDA_SPIN": "1" if spin else "0"}
    jobs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    outs = [j.communicate()[0].split() for j in jobs]
    if any(j.returncode for j in jobs):
        raise SystemExit(f"a worker failed (procs={procs}, spin={spin})")
    wall = max(float(o[2]) for o in outs) - start_at
    if max(float(o[1]) for o in outs) > start_at + 0.5:
        raise SystemExit(f"start-up outlasted the common start (procs={procs}): raise its margin")
    return {
        "procs": procs, "cores": cores, "mode": outs[0][3], "wall_s": round(wall, 2),
        "cpu_s": round(sum(float(o[0]) for o in outs), 2),
        # the least wall possible: one process's iterations, or all CPU work spread on the cores
        "ideal_s": round(max(iters * (gpu_ms + cpu_ms), procs * iters * cpu_ms / cores) / 1000, 2),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, action="append", help="process counts (repeatable)")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--gpu-ms", type=float, default=20.0)
    ap.add_argument("--cpu-ms", type=float, default=10.0)
    ap.add_argument("--out", help="write the rows as JSON")
    a = ap.parse_args()
    rows = []
    for procs in a.procs or [14, 28]:
        pair = {}
        for spin in (True, False):
            pair[spin] = run(procs, a.cores, a.iters, a.gpu_ms, a.cpu_ms, spin)
            rows.append(pair[spin])
            print(json.dumps(pair[spin]), flush=True)
        print(f"procs {procs} on {a.cores} cores: spin {pair[True]['wall_s']} s, "
              f"sleep {pair[False]['wall_s']} s, spin/sleep {pair[True]['wall_s'] / pair[False]['wall_s']:.2f}x; "
              f"CPU {pair[True]['cpu_s']} s vs {pair[False]['cpu_s']} s", flush=True)  # fmt: skip
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
