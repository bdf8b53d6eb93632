"""A job's log lines: what it does now, with the seconds since its process started. Torch-free:
the command line prints the first and last line of every job."""

from __future__ import annotations

import os
import time


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


# A progress line at most this often: a log stays a page long however fast its loop runs, and a
# reader watching it still sees the job move.
EVERY_S = 15.0


class Progress:
    """Progress lines of one loop through ``say``, rate-limited by the clock, not by steps: at
    most one every ``every_s`` seconds, with the count, the rate and the time left.

    ``update`` costs a clock read when no line is due. Values passed to it must already be on
    the host (floats, ints): reading a device tensor there would wait for the GPU every step.
    ``per_unit`` = (name, amount per unit) adds a second rate, e.g. ("tokens", B * T)."""

    def __init__(
        self, label: str, total: int, unit: str = "steps", every_s: float = EVERY_S,
        per_unit: tuple[str, float] | None = None,
    ) -> None:  # fmt: skip
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.per_unit = per_unit
        self.t0 = self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every_s

    def update(self, done: int, **values: float) -> None:
        """A line when one is due (``line``); else nothing."""
        if self.due():
            self.line(done, **values)

    def line(self, done: int, **values: float) -> None:
        """``label: done/total unit, rate, time left, name value ...`` now."""
        now = time.monotonic()
        self.last = now
        rate = done / (now - self.t0) if now > self.t0 else float("nan")
        parts = [f"{done}/{self.total} {self.unit}", f"{rate:.3g} {self.unit}/s"]
        if self.per_unit is not None:
            parts.append(f"{rate * self.per_unit[1]:.3g} {self.per_unit[0]}/s")
        if 0 < done < self.total and rate > 0:
            parts.append(f"about {(self.total - done) / rate:.0f} s left")
        parts += [f"{k.replace('_', ' ')} {v:.4g}" for k, v in values.items()]
        say(f"{self.label}: {', '.join(parts)}")
