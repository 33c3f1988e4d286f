"""Progress as plain lines, for a console that is not a terminal (a CI log, ``nohup``, a batch job's output file).

rich draws its bars only on a terminal; elsewhere it shows them once, when they stop, so a run of hours written to a
file said nothing until it ended (and a run that hung said nothing at all). ``LineProgress`` offers the part of
rich's ``Progress`` the commands use (``add_task``, ``update``, a context) and prints a task's state as one line when
it starts, when it first moves, at most every ``every`` seconds after that, when it completes, and once more when the
bars stop if that last state was not printed yet."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

EVERY = 30.0  # [s] the shortest time between two lines of one task while it moves


@dataclass
class _Task:
    description: str
    total: float
    started: float
    completed: float = 0.0
    printed_at: float = field(default=float("-inf"))
    printed: str = ""
    moved: bool = False  # a line has shown it past 0


def elapsed(seconds: float) -> str:
    """``H:MM:SS``, as rich's elapsed column writes it."""
    whole = int(max(seconds, 0.0))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class LineProgress:
    """The commands' progress bars as plain lines (see the module's docstring); safe to update from the thread that
    follows a run's progress file while the main thread adds tasks."""

    def __init__(self, every: float = EVERY, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.out = out
        self.clock = clock
        self._tasks: list[_Task] = []
        self._lock = threading.Lock()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            for task in self._tasks:
                self._show(task)

    def add_task(self, description: str, total: float | None = None) -> int:
        """A new task (its first line now); its id for ``update``."""
        with self._lock:
            task = _Task(description, float(total or 0), self.clock())
            self._tasks.append(task)
            self._show(task)
            return len(self._tasks) - 1

    def update(self, task_id: int, *, completed: float | None = None, description: str | None = None) -> None:
        """Move a task; its line is printed when it first moves, when it completes, or ``every`` seconds after its last."""
        with self._lock:
            task = self._tasks[task_id]
            if completed is not None:
                task.completed = float(completed)
            if description is not None:
                task.description = description
            done = bool(task.total) and task.completed >= task.total
            first = task.completed > 0 and not task.moved  # the first round done: the start-up is over
            if done or first or self.clock() - task.printed_at >= self.every:
                task.moved = task.completed > 0
                self._show(task)

    def _show(self, task: _Task) -> None:
        """Print the task's line, unless it says what its last line said."""
        now = self.clock()
        count = f"{task.completed:g}/{task.total:g}" if task.total else f"{task.completed:g}"
        state = f"{task.description} {count}"
        if state == task.printed:
            return
        task.printed, task.printed_at = state, now
        print(f"{state} {elapsed(now - task.started)}", file=self.out or sys.stdout, flush=True)
