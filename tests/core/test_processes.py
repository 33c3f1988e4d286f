"""Free ports are chosen where no outgoing connection can take them before the listener binds."""

import socket

import pytest

from core import processes
from core.processes import free_ports


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    ephemeral = processes._ephemeral_range()
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        assert port not in ephemeral and port in processes.LISTEN_PORTS
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_already_listened_on_is_never_handed_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(processes, "LISTEN_PORTS", range(taken, taken + 2))
        monkeypatch.setattr(processes, "_ephemeral_range", lambda: range(0))
        (port,) = free_ports(1)
        assert port == taken + 1
        with pytest.raises(OSError, match="fewer than 2 free ports"):
            free_ports(2)
