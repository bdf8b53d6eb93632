"""Snakemake's exit without its idle wait.

At every pass of its scheduler Snakemake (9.x) arms a ``threading.Timer`` of the rate limit's
timespan (the default profile's ``max-jobs-per-timespan``: 10 s) that wakes the scheduler once
the limit frees a slot. The timers are not daemon threads, so the interpreter waits for the last
one before it exits: a build ended up to 10 s after its last job. Once the scheduler has
returned (``onsuccess``, ``onerror``) nothing is left for them to wake, and cancelling them lets
the process end at once. Torch-free: the Snakefile imports it.
"""

from __future__ import annotations

import threading

# the qualified name of the method whose timers these are (snakemake.scheduling.job_scheduler)
REEVALUATION = "JobScheduler._schedule_reevalutation"


def cancel_scheduler_timers() -> int:
    """Cancel the scheduler's pending wake-up timers; return how many there were."""
    timers = [
        t
        for t in threading.enumerate()
        if isinstance(t, threading.Timer)
        and getattr(t.function, "__qualname__", "").startswith(REEVALUATION)
    ]
    for t in timers:
        t.cancel()
    return len(timers)
