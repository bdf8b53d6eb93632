"""pillm.scheduler_exit: the scheduler's wake-up timers are cancelled, other timers are not, and
the method whose timers they are still exists in the installed Snakemake."""

import threading

from pillm.scheduler_exit import REEVALUATION, cancel_scheduler_timers


class JobScheduler:  # the shape of Snakemake's: a method that arms a non-daemon Timer
    def _schedule_reevalutation(self, delay: float) -> threading.Timer:
        timer = threading.Timer(delay, lambda: None)
        timer.start()
        return timer


def test_only_the_schedulers_timers_are_cancelled():
    ours = JobScheduler()._schedule_reevalutation(60)
    other = threading.Timer(60, lambda: None)
    other.start()
    try:
        assert cancel_scheduler_timers() == 1
        ours.join(timeout=5)
        assert not ours.is_alive() and other.is_alive()
    finally:
        other.cancel()
        ours.cancel()


def test_snakemake_still_arms_its_timers_in_that_method():
    """A Snakemake that renamed the method would leave its timers running: this says so."""
    import inspect

    from snakemake.scheduling.job_scheduler import JobScheduler as Real

    method = getattr(Real, REEVALUATION.split(".")[1])
    assert "threading.Timer(" in inspect.getsource(method)
