"""Local process plumbing shared by ``leakbed deploy-local``, the attack pool and the integration tests.

Free ports on 127.0.0.1, and ending a process tree (SIGTERM, a grace period, then SIGKILL) found
through ``/proc`` (Linux), so a SuperLink's detached SuperExec or Ray's raylet is never left behind.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import time
from collections.abc import Iterable
from pathlib import Path

LISTEN_PORTS = range(20000, 32768)  # where free_ports looks: below Linux's default ephemeral range


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


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (which is in parentheses and may hold spaces)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has exited already)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        fields = _stat_fields(pid)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def marked(key: str, value: str) -> list[int]:
    """Every live process whose environment holds ``key=value``: what a process tree left behind after its
    members detached into sessions of their own or were re-parented (children inherit the environment)."""
    needle = f"{key}={value}".encode()
    out = []
    for pid in all_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and alive(pid):
            out.append(pid)
    return out


def terminate(pids: Iterable[int], grace: float = 10.0) -> list[int]:
    """SIGTERM each pid, wait up to ``grace`` seconds, SIGKILL what is left; returns the pids that needed SIGKILL."""
    pids = [p for p in dict.fromkeys(pids) if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    killed = []
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def terminate_tree(root: int, grace: float = 10.0) -> None:
    """End ``root`` and all its descendants (collected before anything is signalled)."""
    terminate([root, *descendants(root)], grace)
