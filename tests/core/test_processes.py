"""Free ports are chosen where no outgoing connection can take them before the listener binds."""

import os
import socket
import sys
import time

import pytest

from leakbed.core import processes
from leakbed.core.processes import free_ports


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


DETACH = """
import os, subprocess, sys, time
# a grandchild in a session of its own, re-parented to init once this child exits: found only by its mark
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
time.sleep(300)
"""


def test_a_group_finds_and_ends_everything_it_started_however_far_it_detached(tmp_path):
    from leakbed.core.processes import ProcessGroup, alive, marked

    group = ProcessGroup()
    child = group.start("tree", [sys.executable, "-c", DETACH], os.environ, tmp_path / "tree.log")
    deadline = time.monotonic() + 20
    while len(group.members()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    members = {p.pid for p in group.members()}
    assert child.pid in members and len(members) == 3, members
    assert set(marked(processes.MARK, group.mark)) == members  # every member carries the mark
    t0 = time.monotonic()
    killed = group.stop(grace=1.0)
    assert time.monotonic() - t0 < 10 and killed == 1  # the one ignoring SIGTERM needed SIGKILL
    assert not group.alive() and not any(alive(p) for p in members)


def test_another_groups_processes_are_left_alone(tmp_path):
    from leakbed.core.processes import ProcessGroup

    mine, theirs = ProcessGroup(), ProcessGroup()
    theirs.start("other", [sys.executable, "-c", "import time; time.sleep(60)"], os.environ, tmp_path / "o.log")
    mine.start("mine", [sys.executable, "-c", "import time; time.sleep(60)"], os.environ, tmp_path / "m.log")
    try:
        mine.stop(grace=1.0)
        assert not mine.alive() and len(theirs.alive()) == 1
    finally:
        theirs.stop(grace=1.0)
