"""One attack worker process on this host, started, watched and restarted by the pool (or by a
remote worker's gateway), serving the attack service on a Unix socket in a folder of its own.

Never a TCP port: the socket's folder is private (mode 0700) and, sandboxed (``attacks.sandbox``),
it is the only folder besides the store the worker may write, inside a network namespace of its own.
Its output goes to a log file; when it dies, ``death`` says how (bwrap and the shell report a death
by signal N as exit code 128 + N).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attacks.sandbox import Limits, Sandbox
from core.processes import alive, descendants

SOCKET_NAME = "worker.sock"
SIGNALS = {
    signal.SIGKILL: "SIGKILL: the kernel's OOM killer, or a kill",
    signal.SIGSEGV: "SIGSEGV: a crash in native code",
    signal.SIGABRT: "SIGABRT: an abort in native code",
    signal.SIGBUS: "SIGBUS",
    signal.SIGXCPU: "SIGXCPU: over its CPU-time limit",
    signal.SIGXFSZ: "SIGXFSZ: over its file-size limit",
    signal.SIGSYS: "SIGSYS: a refused system call",
}


def exit_meaning(code: int) -> str:
    """What a worker's exit code says: a signal it died of (negative for a direct child, 128+N through bwrap)."""
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    if number:
        try:
            sig = signal.Signals(number)
        except ValueError:
            return f"signal {number}"
        return SIGNALS.get(sig, sig.name)
    return f"exit code {code}"


class WorkerProcess:
    """``python -m attacks.worker --socket ...`` in the sandbox (``limits``) or, with ``limits=None``, unsandboxed."""

    def __init__(
        self, index: int, store_root: Path, log_path: Path, limits: Limits | None, *, warm: bool = False, cuda: bool = False
    ) -> None:
        self.index = index
        self.store_root = Path(store_root).resolve()
        self.socket_dir = Path(tempfile.mkdtemp(prefix="leakbed-w"))  # short: a Unix socket path has at most 107 bytes
        self.socket = self.socket_dir / SOCKET_NAME
        self.limits = limits
        self.cuda = cuda
        self.worker = ["-m", "attacks.worker", "--socket", str(self.socket), "--store", str(self.store_root)]
        if warm:
            self.worker.append("--warm")
        self.log_path = log_path
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.restarts = 0
        self.last_death = ""  # how the previous process ended (kept across a restart)
        self.proc = self._spawn()

    @property
    def sandboxed(self) -> bool:
        return self.limits is not None

    def adopt_new_runs(self) -> None:
        """Give a sandboxed worker the run folders the server made in its store since it started."""
        if self.limits is not None:
            self.box.give_new_runs()

    @property
    def address(self) -> str:
        """The gRPC target of this worker."""
        return f"unix:{self.socket}"

    def _spawn(self) -> subprocess.Popen:
        self.socket.unlink(missing_ok=True)
        with self.log_path.open("ab") as out:
            io = {"stdout": out, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL}
            if self.limits is not None:
                self.box = Sandbox(self.store_root, self.limits, self.socket_dir, self.cuda)
                return self.box.popen([sys.executable, *self.worker], **io)
            return subprocess.Popen([sys.executable, *self.worker, "--parent-pid", str(os.getpid())], **io)  # type: ignore[arg-type]

    def death(self) -> str:
        """How it ended and the last line it wrote, so a crash says why in the pool's errors and report."""
        code = self.proc.poll()
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        fatal = [line for line in lines if line.startswith("Fatal Python error")]  # faulthandler: died of a signal
        words = " / ".join(dict.fromkeys([*fatal[-1:], *lines[-1:]]))[-300:]
        how = "still running" if code is None else exit_meaning(code)
        return f"{how}; last words: {words}" if words else how

    def restart(self) -> None:
        self.last_death = self.death()
        self.restarts += 1
        self.proc = self._spawn()

    def stop(self) -> None:
        """End it (and, sandboxed, everything in its sandbox: bwrap's --die-with-parent) and remove its socket's folder."""
        if self.proc.poll() is None:
            inner = descendants(self.proc.pid)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            deadline = time.monotonic() + 10
            while any(alive(p) for p in inner) and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
