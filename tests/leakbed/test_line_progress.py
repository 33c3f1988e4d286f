"""Progress on a console that is not a terminal: plain lines as the run goes, not rich's bars once it has ended."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

from leakbed.line_progress import LineProgress, elapsed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_task_prints_when_it_starts_every_interval_when_it_completes_and_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    with LineProgress(every=30.0, out=out, clock=clock) as bar:
        fl = bar.add_task("random prior: FL rounds", total=400)
        for rnd in range(1, 12):  # a round every 5 s: the first, then one line per 30 s, not one per round
            clock.now += 5.0
            bar.update(fl, completed=rnd, description=f"random prior: FL rounds (utility 0.{rnd:02d})")
        side = bar.add_task("random prior: attacks", total=3)
        clock.now += 1.0
        bar.update(side, completed=3, description="random prior: attacks (lag 0)")  # complete: at once
        clock.now += 1.0
        bar.update(fl, completed=12)
    assert out.getvalue().splitlines() == [
        "random prior: FL rounds 0/400 0:00:00",
        "random prior: FL rounds (utility 0.01) 1/400 0:00:05",  # the first round: the start-up is over
        "random prior: FL rounds (utility 0.07) 7/400 0:00:35",
        "random prior: attacks 0/3 0:00:00",
        "random prior: attacks (lag 0) 3/3 0:00:01",
        "random prior: FL rounds (utility 0.11) 12/400 0:00:57",  # the last state, when the bars stop
    ]


def test_an_unchanged_task_says_nothing_more() -> None:
    out, clock = io.StringIO(), Clock()
    with LineProgress(every=1.0, out=out, clock=clock) as bar:
        task = bar.add_task("sweep", total=2)
        for _ in range(3):
            clock.now += 10.0
            bar.update(task, completed=0)
    assert out.getvalue().splitlines() == ["sweep 0/2 0:00:00"]


def test_elapsed_is_written_as_rich_writes_it() -> None:
    assert [elapsed(s) for s in (0, 59.9, 61, 3600 + 62, -1)] == ["0:00:00", "0:00:59", "0:01:01", "1:01:02", "0:00:00"]


def test_the_commands_bars_are_lines_off_a_terminal_and_rich_bars_on_one() -> None:
    code = "from leakbed import console; print(type(console.progress()).__name__)"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE")}
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert piped.stdout.strip() == "LineProgress"
    main, terminal = pty.openpty()
    try:
        for term, kind in (("xterm", "Progress"), ("dumb", "LineProgress")):  # rich draws no bars on a dumb one
            subprocess.run([sys.executable, "-c", code], stdout=terminal, check=True, env={**env, "TERM": term})
            assert os.read(main, 1000).decode().strip() == kind, term
    finally:
        os.close(main)
        os.close(terminal)
