"""A host uid of its own for each sandbox that root starts, so that no two sandboxes share one.

Two processes of one uid can signal, trace and read each other (``/proc/<pid>/mem``, ``/proc/<pid>/root``) wherever
they can name each other, and share one RLIMIT_NPROC. Sandboxes are kept apart by their namespaces first; where
leakbed runs as root it also drops each sandbox to a uid of its own (``setpriv``), leased from a reserved range for
as long as the sandbox runs: a lock file per uid, held by the process that started the sandbox (the kernel drops
the lock with that process, whatever ends it), and a uid still running a process is never leased again. An
ordinary user has only its own uid to give: its sandboxes share it, and the namespaces and the allowlist of mounts
carry the isolation alone.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

FIRST = 0x6C620000  # 1,818,361,856: far above the ids of users, system accounts and the usual subordinate ranges
COUNT = 1 << 16  # uids in the range
LOCKS = Path("/run/leakbed/sandbox-uids")


class NoUid(RuntimeError):
    """Every uid of the range is leased or still runs a process (one line)."""


@dataclass
class Lease:
    """A uid held for one sandbox; ``release`` (or this process's end) gives it back.

    Released once whoever calls first: a lane's reader thread polls its sandbox while the pool's close waits on it,
    and two closes of one fd number would close, the second time, whatever file took the number meanwhile."""

    uid: int
    fd: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def release(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.release()


def in_range(uid: int) -> bool:
    return FIRST <= uid < FIRST + COUNT


def _folder() -> Path:
    """The lock files' folder: root's own (``/run``, else the temporary directory), never a link, closed to others."""
    for folder in (LOCKS, Path(tempfile.gettempdir()) / "leakbed-sandbox-uids-0"):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return folder
    raise NoUid("no folder for the sandbox uids' locks (/run/leakbed or the temporary directory)")


def _running(uid: int) -> bool:
    """Whether any process runs as ``uid`` (a sandbox left behind by a leakbed that was killed)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    return True
            except OSError:
                continue
    return False


def lease() -> Lease:
    """The lowest uid of the range no other sandbox holds or runs as (so few lock files are ever made); NoUid when the
    whole range is taken. A uid is leased again once its sandbox has ended: it owns nothing on the host."""
    folder = _folder()
    for slot in range(COUNT):
        fd = os.open(folder / str(slot), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _running(FIRST + slot):
            os.close(fd)
            continue
        return Lease(FIRST + slot, fd)
    raise NoUid(f"all {COUNT} sandbox uids from {FIRST} are in use")
