"""Local process plumbing shared by the launchers (simulation, deploy-local, compose), the attack pool's hosts and the
integration tests: free ports, and the processes a command owns, found and ended with ``psutil``.

A command's processes carry a mark in their environment (``ProcessGroup``): children inherit it, so what a parent
started in a session of its own, or what was re-parented to init when its parent died (Ray's daemons, Flower's
SuperExec), is still found by the mark, never by its name. The mark is read from ``/proc/<pid>/environ`` entry by
entry (``environment``): a process that renames itself over its argv (setproctitle: Ray's ``ray::DashboardAgent`` and
``ray::RuntimeEnvAgent``) zeroes the head of that block, and psutil's ``environ()`` then reads it as empty. Where the
zeroes reach the mark itself (seen: 2,156 of an agent's 2,196 bytes), what a marked process started is still the
group's (its descendants), and so is whatever holds a file in a folder the group owns (``holding``): the agents keep
their logs open in the Ray session folder inside the simulation's private home.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import psutil

LISTEN_PORTS = range(20000, 32768)  # where free_ports looks: below Linux's default ephemeral range
MARK = "LEAKBED_OWNER"  # in the environment of every process a ProcessGroup starts


def _ephemeral_range() -> range:
    """The kernel's range for outgoing connections' local ports (Linux's default when unreadable)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports nothing listens on right now, outside the kernel's ephemeral range.

    A port the kernel hands out (bind to 0) can be taken, before our process binds it, as the
    local end of any outgoing connection on the machine, and the listener's bind then fails; ports
    below the ephemeral range are taken only by an explicit bind.
    """
    ephemeral = _ephemeral_range()
    candidates = [p for p in range(LISTEN_PORTS.start, LISTEN_PORTS.stop) if p not in ephemeral]
    random.SystemRandom().shuffle(candidates)  # not a result: ports never enter any number
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise OSError(f"fewer than {n} free ports in {LISTEN_PORTS.start}-{LISTEN_PORTS.stop - 1} on {host}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One TCP port on ``host`` that nothing listens on right now."""
    return free_ports(1, host)[0]


def alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has exited already)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def all_pids() -> list[int]:
    return psutil.pids()


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    try:
        return [c.pid for c in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def environment(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with ({} when it cannot be read), every ``KEY=VALUE`` entry of
    ``/proc/<pid>/environ``, wherever it lies in the block.

    psutil's ``Process.environ()`` stops at the first empty entry: Ray's agents rename themselves
    (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) by overwriting their argv, which zeroes the head of the
    environment block after it, so psutil reads ``{}`` where the mark is often still there further on. Those two
    agents escaped every stop and, when their raylet had to be killed, outlived the run (re-parented to init, for a
    minute or more).
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            block = f.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in block.split(b"\0"):
        key, eq, val = entry.partition(b"=")
        if eq and key:
            out.setdefault(key.decode(errors="surrogateescape"), val.decode(errors="surrogateescape"))
    return out


def holding(folder: Path) -> list[int]:
    """Every live process whose working directory, or one of whose open files (a deleted one too), is under
    ``folder``."""
    inside = str(folder.resolve())

    def under(link: str) -> bool:
        path = link.removesuffix(" (deleted)")
        return path == inside or path.startswith(inside + "/")

    out = []
    for pid in psutil.pids():
        base = f"/proc/{pid}"
        try:
            links = [os.readlink(f"{base}/cwd")]
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    links.append(os.readlink(f"{base}/fd/{fd}"))
        except OSError:
            continue
        if any(map(under, links)) and alive(pid):
            out.append(pid)
    return out


def marked(key: str, value: str) -> list[int]:
    """Every live process whose environment holds ``key=value`` (read by ``environment``): what a process tree left
    behind after its members detached into sessions of their own or were re-parented (children inherit the
    environment)."""
    out = []
    for pid in psutil.pids():
        if environment(pid).get(key) == value and alive(pid):
            out.append(pid)
    return out


def terminate(pids: Iterable[int], grace: float = 10.0) -> list[int]:
    """SIGTERM each pid, wait up to ``grace`` seconds, SIGKILL what is left; returns the pids that needed SIGKILL."""
    procs = []
    for pid in dict.fromkeys(pids):
        if pid == os.getpid():
            continue
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    left = _wait_ended(procs, grace)
    killed = []
    for proc in left:
        try:
            proc.kill()
            killed.append(proc.pid)
        except psutil.NoSuchProcess:
            pass
    _wait_ended(left, 5.0)
    return killed


def _ended(proc: psutil.Process) -> bool:
    """Gone, or a zombie: it has ended, and its (new) parent has not reaped it yet (psutil's ``wait_procs`` would wait
    its whole timeout on one that is not our child)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process of ``procs`` has ended, at most ``timeout`` seconds; the ones still running."""
    deadline = time.monotonic() + timeout
    left = [p for p in procs if not _ended(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if not _ended(p)]
    return left


def terminate_tree(root: int, grace: float = 10.0) -> None:
    """End ``root`` and all its descendants (collected before anything is signalled)."""
    terminate([root, *descendants(root)], grace)


class ProcessGroup:
    """Every process one command starts: each in a session of its own, each carrying the group's mark in its
    environment (inherited by whatever it starts), found and ended with psutil. ``stop`` ends them all, however far
    they detached; ``kill`` at once. ``folders``: private folders the group made for its processes alone (a
    simulation's Flower home); whatever holds a file there is the group's too."""

    def __init__(self, mark: str = "", folders: Sequence[Path] = ()) -> None:
        self.mark = mark or uuid.uuid4().hex
        self.started: dict[str, subprocess.Popen] = {}
        self.folders = list(folders)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the group's mark."""
        return {**(os.environ if base is None else base), MARK: self.mark}

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path | None = None, **kw: object
    ) -> subprocess.Popen:
        """Start ``argv`` in a session of its own, marked; its output to ``log`` (appended) unless ``kw`` says else."""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as out:
                kw = {"stdout": out, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL, **kw}
                proc = subprocess.Popen(list(argv), env=self.env(env), start_new_session=True, **kw)  # type: ignore[call-overload]
        else:
            proc = subprocess.Popen(list(argv), env=self.env(env), start_new_session=True, **kw)  # type: ignore[call-overload]
        self.started[name] = proc
        return proc

    def members(self) -> list[psutil.Process]:
        """Every live process of the group: those it started, every process carrying its mark, and their
        descendants; every process holding a file in one of its ``folders``."""
        found: dict[int, psutil.Process] = {}
        for proc in self.started.values():
            if proc.poll() is None:
                try:
                    root = psutil.Process(proc.pid)
                    found[root.pid] = root
                    found |= {c.pid: c for c in root.children(recursive=True)}
                except psutil.NoSuchProcess:
                    pass
        for pid in marked(MARK, self.mark):  # and what they started: a marked parent vouches for its children
            if pid == os.getpid():
                continue
            try:
                proc = psutil.Process(pid)
                found.setdefault(pid, proc)
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass
        for pid in (pid for folder in self.folders for pid in holding(folder)):
            try:
                found.setdefault(pid, psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(self, grace: float = 3.0) -> int:
        """SIGTERM every member, SIGKILL what is left after ``grace`` seconds, then again for any member started
        meanwhile; returns how many needed SIGKILL."""
        killed = 0
        for _ in range(3):
            members = self.members()
            if not members:
                break
            killed += len(terminate([p.pid for p in members], grace))
            grace = 1.0
        for proc in self.started.values():
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return killed

    def kill(self) -> None:
        """SIGKILL every member at once (a second interrupt: no grace)."""
        for proc in self.members():
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass

    def alive(self) -> list[psutil.Process]:
        """The members still running (what a stop left behind: nothing, when it worked)."""
        return [p for p in self.members() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def wait_gone(pids: Iterable[int], timeout: float) -> bool:
    """Whether every pid has ended within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(alive(p) for p in pids)
