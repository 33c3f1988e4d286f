"""Stop when told: SIGINT (Ctrl-C), SIGTERM and SIGHUP end a leakbed command and everything it started.

A command runs its work inside ``interruptible()``. The first of these signals raises ``Interrupted`` in the main
thread, so the work unwinds through its ``finally`` blocks: every launcher stops its ``ProcessGroup`` (SIGTERM, a
short grace, SIGKILL; found by their mark, however far they detached) and removes its temporary folders, and the
command says what it left in one line. A second signal while that happens ends every registered group at once
(SIGKILL) and exits. The groups a command's launchers own are registered here (``register``) while they live.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from leakbed.core.processes import ProcessGroup

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_GROUPS: list[ProcessGroup] = []
_LOCK = threading.Lock()


class Interrupted(BaseException):  # noqa: N818 - a BaseException like KeyboardInterrupt, so no `except Exception` holds it
    """A stop signal arrived: the command unwinds, stopping what it started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a death by that signal (130 for Ctrl-C)."""
        return 128 + self.signum


def register(group: ProcessGroup) -> None:
    with _LOCK:
        _GROUPS.append(group)


def unregister(group: ProcessGroup) -> None:
    with _LOCK:
        if group in _GROUPS:
            _GROUPS.remove(group)


def kill_all() -> None:
    """SIGKILL every process of every registered group (the second interrupt)."""
    with _LOCK:
        groups = list(_GROUPS)
    for group in groups:
        group.kill()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within it, the first stop signal raises ``Interrupted`` in the main thread; a second kills every registered
    group and exits at once with 128 + its number. Outside the main thread it does nothing (a signal handler can
    only be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"seen": 0}

    def handler(signum: int, _frame: object) -> None:
        state["seen"] += 1
        if state["seen"] > 1:
            kill_all()
            os._exit(128 + signum)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
