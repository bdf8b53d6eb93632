"""A job's log lines: what it does now, with the seconds since its process started. Torch-free:
the command line prints the first and last line of every job."""

from __future__ import annotations

import os


def process_seconds() -> float:
    """Seconds since this process started, imports included (Linux ``/proc``; nan elsewhere):
    a job's fixed cost is what its own clocks, started after the imports, cannot see."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    """One line of a job's log: seconds since the process started, then what it does now."""
    print(f"[{process_seconds():7.1f} s] {message}", flush=True)
