"""What a finished command left behind: a test gives the command a ``Witness`` (an environment value every process it
starts inherits, and a temporary folder of its own as ``TMPDIR``) and, once the command has exited, asks what is left.

The temporary folder is a short one in /tmp (a Unix socket's path must fit 107 bytes, and Ray's session folder, whose
sockets are several levels down, is made under ``TMPDIR``); it is removed when the test leaves the ``Witness``.

A process is the command's when it carries the witness in its environment (read entry by entry:
``core.processes.environment``; Ray's agents overwrite the head of theirs) or when it still has its working directory
or a file open under the command's temporary folder (a Ray agent whose environment was overwritten whole still holds
its log files there). A folder or socket is the command's when it lies in that temporary folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Self

import psutil

from leakbed.core.processes import alive, environment, holding

WITNESS = "LEAKBED_TEST_WITNESS"


def sockets(folders: Iterable[Path]) -> list[str]:
    """Every Unix socket file under ``folders``."""
    found = []
    for folder in folders:
        for path in folder.rglob("*") if folder.is_dir() else []:
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.append(str(path))
            except OSError:
                continue
    return found


class Witness:
    """The environment a test starts a command with (``env``) and, after it exited, what it left (``processes``,
    ``files``, ``check``); a context manager that removes the temporary folder at its end."""

    def __init__(self) -> None:
        self.value = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="lkw-", dir="/tmp"))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the witness and the command's own ``TMPDIR``."""
        return {**(os.environ if base is None else base), WITNESS: self.value, "TMPDIR": str(self.tmp)}

    def processes(self) -> dict[int, str]:
        """Every live process of the command ({pid: what it runs})."""
        found = {}
        using = set(holding(self.tmp))
        for pid in psutil.pids():
            if pid == os.getpid():
                continue
            if (pid in using or environment(pid).get(WITNESS) == self.value) and alive(pid):
                try:
                    proc = psutil.Process(pid)
                    found[pid] = f"{proc.name()} {' '.join(proc.cmdline())[:160]}".strip()
                except psutil.Error:
                    continue
        return found

    def files(self) -> list[str]:
        """What is left in the command's temporary folder."""
        return sorted(str(p.relative_to(self.tmp)) for p in self.tmp.rglob("*"))

    def check(self, *folders: Path, expected: Iterable[int] = ()) -> None:
        """Nothing of the command is left: no process (but the ``expected`` pids), nothing in its temporary folder, no
        Unix socket under ``folders``."""
        left = {pid: what for pid, what in self.processes().items() if pid not in set(expected)}
        assert not left, f"processes left after the command exited: {left}"
        assert not self.files(), f"left in its temporary folder {self.tmp}: {self.files()[:20]}"
        assert not sockets(folders), f"sockets left: {sockets(folders)}"
