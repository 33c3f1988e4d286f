"""A sandbox's guard: what kills its command when the process that started the sandbox dies without ending it.

As root, a sandbox's command runs under a uid leased for it alone (``workers.uids``) while bwrap's own process keeps
no capability, so the kernel refuses bwrap's parent-death signal (``--die-with-parent``) to the command (tried): a
spawner killed by SIGKILL or the OOM killer would leave the command running, orphaned, for as long as it likes. The
guard is a shell of the sandbox's uid outside the sandbox (whose PID namespace cannot name it, so the command can
neither signal nor trace it), blocked reading a pipe whose only write end the spawner holds. When that end closes,
by ``close`` or by the kernel at the spawner's death, it sends SIGKILL to every process of its uid, which is the
sandbox's alone while the lease holds, and exits. An ordinary user's sandboxes need none: bwrap and the command
share the user's uid, and the parent-death signal reaches the command."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

from leakbed.workers.privileges import drop

__all__ = ["Guard", "start"]
KILL_ALL = "read _; kill -s KILL -- -1"  # EOF: every process this uid may signal (its own), itself spared


@dataclass
class Guard:
    """A started guard and the write end of its pipe. ``close`` (once, whoever calls first: a lane's reader thread
    and the pool's close both end a sandbox) lets it kill what is left of its uid and waits for it."""

    proc: subprocess.Popen
    fd: int
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def close(self) -> None:
        if not self._close_pipe():
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __del__(self) -> None:
        self._close_pipe()  # no wait here: the guard exits by itself, and subprocess reaps it later

    def _close_pipe(self) -> bool:
        """Close the write end if no one has yet; whether this call did."""
        with self._lock:
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        return fd >= 0


def start(uid: int) -> Guard:
    """A guard for the sandbox about to run as ``uid`` (root only: it drops to that uid), in a session of its own so
    that a terminal's signals to the spawner's group do not end it first."""
    read, write = os.pipe()  # both close-on-exec: no other child of the spawner keeps the write end open
    try:
        sh = shutil.which("sh") or "/bin/sh"
        proc = subprocess.Popen(
            [*drop(uid), sh, "-c", KILL_ALL], stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"}, close_fds=True, start_new_session=True,
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return Guard(proc, write)
