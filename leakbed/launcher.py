"""One launcher: how a command starts what it runs on, waits for it, reads its logs and ends it.

The shape is NVFlare's job launcher spec (``nvflare/apis/job_launcher_spec.py``): launch, poll, wait and terminate,
with a process and a Docker implementation. Here, three: the simulation (``leakbed.simulate.SimulationLink``: a
private SuperLink and Ray), the local deployment (``leakbed.deploy_local.Deployment``) and compose
(``leakbed.stack.ComposeLauncher``). A command then holds every launch the same way: ``with`` one, so an error or a
stop signal (``leakbed.interrupts``) ends all it started. Each owns what it starts and finds it again by a mark, never
by a name: a process launcher by its ``ProcessGroup``'s mark in each process's environment, compose by the project
label on each container.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from leakbed import interrupts
from leakbed.core.processes import ProcessGroup

STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when a process launcher stops


@runtime_checkable
class Launcher(Protocol):
    """Start what it runs (its arguments are the launcher's own: a named process, or the whole stack), ``wait`` until
    that has ended (its exit code: the first non-zero one, else 0; ``None`` while it still runs after ``timeout``
    seconds), ``logs`` (a name to the file holding its log), ``stop`` (everything it started, however far it
    detached; again is harmless). As a context manager it stops on exit, an exception or an interrupt included."""

    def start(self, *args: Any, **kwargs: Any) -> object: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def stop(self) -> None: ...

    def logs(self) -> dict[str, Path]: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class ProcessLauncher:
    """A launcher of local processes: one ``ProcessGroup`` (each process in a session of its own, carrying the group's
    mark, found and ended with psutil), registered with ``leakbed.interrupts`` from creation until ``stop``. ``start``
    runs one named process with the launcher's environment, its output to ``<logs>/<name>.log`` unless told where."""

    def __init__(self, logs: Path, env: Mapping[str, str], group: ProcessGroup | None = None, grace: float = STOP_GRACE) -> None:
        self.logs_dir = logs
        self.env = dict(env)
        self.group = group or ProcessGroup()
        self.grace = grace
        self._logs: dict[str, Path] = {}
        interrupts.register(self.group)

    @property
    def mark(self) -> str:
        """The value of ``core.processes.MARK`` in the environment of every process it started, and theirs."""
        return self.group.mark

    @property
    def procs(self) -> dict[str, subprocess.Popen]:
        return self.group.started

    def start(self, name: str, argv: Sequence[str], log: Path | None = None, **kw: object) -> subprocess.Popen:
        """Start ``argv`` as ``name`` (marked, in a session of its own), its output appended to ``log``."""
        log = log or self.logs_dir / f"{name}.log"
        self._logs[name] = log
        return self.group.start(name, argv, self.env, log, **kw)

    def wait(self, timeout: float | None = None) -> int | None:
        """Until every process it started has ended (what they left behind is ``stop``'s to find): the first non-zero
        exit code in start order, else 0; ``None`` when one still runs after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for proc in list(self.procs.values()):
            try:
                proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return None
        return next((p.returncode for p in self.procs.values() if p.returncode), 0)

    def logs(self) -> dict[str, Path]:
        """Where each process it started logs, by name (those that have written a log)."""
        return {name: path for name, path in self._logs.items() if path.exists()}

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM every process of the group (those it started, their descendants, any other carrying its mark),
        SIGKILL what is left after ``grace`` seconds; it is then no longer the interrupt handler's to end."""
        self.group.stop(self.grace if grace is None else grace)
        interrupts.unregister(self.group)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
