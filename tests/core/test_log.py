"""A job's log lines: progress lines rate-limited by the clock, each a plain line of its own."""

from pillm.core import log


def test_progress_prints_at_most_one_line_per_interval(capsys, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(log.time, "monotonic", lambda: now[0])
    progress = log.Progress("train", 100, per_unit=("tokens", 64), every_s=10)
    for step in range(1, 101):
        now[0] += 0.5  # 2 steps a second: a line every 20 steps
        progress.update(step, val_loss=2.5)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and all("\r" not in line for line in lines)
    assert lines[0].endswith("train: 20/100 steps, 2 steps/s, 128 tokens/s, about 40 s left, "
                             "val loss 2.5")  # fmt: skip
    assert "s left" not in lines[-1] and "100/100 steps" in lines[-1]


def test_progress_is_silent_before_its_first_interval(capsys):
    progress = log.Progress("solve", 3, unit="layers")
    for done in range(3):
        progress.update(done)
    assert capsys.readouterr().out == ""
    progress.line(3)
    assert "solve: 3/3 layers" in capsys.readouterr().out
