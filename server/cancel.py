"""Ending a ServerApp whose Simulation Runtime has crashed.

When Ray fails to start, Flower's ``run_simulation`` raises but leaves the ServerApp thread
waiting in ``Grid.send_and_receive`` until the round timeout, then running its remaining rounds
against a dead runtime. A launcher that starts the run again must stop that thread first: it
would hold the process open and could later write into the retried run's folder. The launcher
cancels through a ``RunControl``; the grid's next push or pull then raises ``RunCancelled``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from flwr.serverapp import Grid


class RunCancelled(RuntimeError):
    """The launcher abandoned this run; nothing of it is written."""


@dataclass
class RunControl:
    """Shared by a launcher and the ServerApp main it started."""

    cancel: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def abandon(self, wait_seconds: float = 60.0) -> None:
        """Cancel the run and wait for its main to return (if it ever started)."""
        self.cancel.set()
        if self.started.is_set():
            self.done.wait(wait_seconds)


def cancellable(grid: Grid, control: RunControl) -> Grid:
    """Make ``grid``'s pushes and pulls raise ``RunCancelled`` once ``control`` is cancelled."""
    for name in ("push_messages", "pull_messages"):
        original = getattr(grid, name)

        def guarded(*args: object, _original: Callable = original, **kwargs: object) -> object:
            if control.cancel.is_set():
                raise RunCancelled("the launcher abandoned this run (its Simulation Runtime crashed)")
            return _original(*args, **kwargs)

        setattr(grid, name, guarded)
    return grid


def controlled_main(main: Callable[[Grid], None], grid: Grid, control: RunControl | None) -> None:
    """Run ``main(grid)`` under ``control`` (None: as is)."""
    if control is None:
        main(grid)
        return
    control.started.set()
    try:
        main(cancellable(grid, control))
    finally:
        control.done.set()
