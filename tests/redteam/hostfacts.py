"""What a determined attacker would know about the host, gathered outside the sandbox: the break-out probes'
arguments (``attacks.breakout``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def listening_tcp_ports() -> list[int]:
    """Every TCP port in LISTEN state on this host (IPv4 and IPv6)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def abstract_unix_sockets() -> list[str]:
    """The host's abstract Unix socket names (``@name``) that listen."""
    names = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("@") and fields[3] == "00010000":  # __SO_ACCEPTCON
            names.append(fields[7])
    return sorted(set(names))


def host_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (what a process sharing its network could connect to)."""
    found = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(info[4][0])
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127."))


def probe_args(*, secret: list[Path], outside: list[Path], pids: list[int] | None = None) -> list[str]:
    """``attacks.breakout`` arguments naming every port, abstract socket, address and the given paths and pids."""
    argv = []
    for port in listening_tcp_ports():
        argv += ["--port", str(port)]
    for name in abstract_unix_sockets():
        argv += ["--abstract", name]
    for address in host_addresses():
        argv += ["--host-address", address]
    for pid in pids if pids is not None else [os.getpid(), os.getppid()]:
        argv += ["--pid", str(pid)]
    for path in secret:
        argv += ["--secret", str(path)]
    for path in outside:
        argv += ["--outside", str(path)]
    return argv
