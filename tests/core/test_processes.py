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


RENAMED = """
import subprocess, sys, time
# a grandchild that renames itself as Ray's agents do (ray::DashboardAgent), re-parented to init once this child exits
code = "import time, ray._raylet; ray._raylet.setproctitle('ray::DashboardAgent'); print('renamed', flush=True); time.sleep(300)"
subprocess.Popen([sys.executable, "-c", code, "an agent's long command line " * 8], start_new_session=True, stdout=sys.stdout)
"""


def test_a_process_that_renamed_itself_over_its_environment_is_still_found_and_ended(tmp_path):
    """Ray's agents call setproctitle, which zeroes the head of their environment block: psutil's ``environ()`` reads it
    as empty, so they escaped every stop and outlived each run (re-parented to init) until the mark was read entry by
    entry (``processes.environment``)."""
    import psutil

    from leakbed.core.processes import MARK, ProcessGroup, alive, environment, marked

    group = ProcessGroup()
    log = tmp_path / "tree.log"
    group.start("tree", [sys.executable, "-c", RENAMED], os.environ, log).wait(timeout=30)
    deadline = time.monotonic() + 60
    while "renamed" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    (agent,) = marked(MARK, group.mark)  # the child has exited: only the renamed grandchild is left
    try:
        assert psutil.Process(agent).name() == "ray::DashboardAgent" and psutil.Process(agent).ppid() != os.getpid()
        assert MARK not in psutil.Process(agent).environ()  # psutil's reading: what let the agents escape
        assert environment(agent)[MARK] == group.mark
        assert {p.pid for p in group.members()} == {agent}
        group.stop(grace=1.0)
        assert not alive(agent)
    finally:
        if alive(agent):
            psutil.Process(agent).kill()


def test_what_holds_a_file_in_a_folder_the_group_owns_is_the_groups(tmp_path):
    """A process whose mark was overwritten whole (one Ray agent's 2,156 zeroed bytes of 2,196 reached it) and whose
    parent is gone is still the group's while it keeps a file open in the group's private folder (the agents' logs in
    the Ray session folder); a folder the group does not own is not looked at."""
    import psutil

    from leakbed.core.processes import MARK, ProcessGroup, alive, holding, marked

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    code = "import sys, time; f = open(sys.argv[1], 'w'); print('open', flush=True); time.sleep(300)"
    bare = {"PATH": os.environ.get("PATH", "")}  # no mark at all
    log = tmp_path / "out.log"
    with log.open("w") as out:
        agent = psutil.Popen([sys.executable, "-c", code, str(home / "agent.log")], env=bare, stdout=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "open" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        other = ProcessGroup(folders=[elsewhere])
        group = ProcessGroup(folders=[home])
        assert holding(home) == [agent.pid] and not marked(MARK, group.mark)
        assert {p.pid for p in group.members()} == {agent.pid} and not other.members()
        group.stop(grace=1.0)
        assert not alive(agent.pid)
    finally:
        if alive(agent.pid):
            agent.kill()
        agent.wait()
