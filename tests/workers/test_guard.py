"""A sandbox's guard (root only): it kills every process of its uid once the spawner's end of its pipe closes,
spares every other uid, and is gone, with nothing of its sandbox left, once the sandbox has ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from leakbed.core.processes import alive, descendants, wait_gone
from leakbed.workers import guard, sandbox, uids
from leakbed.workers.privileges import drop
from leakbed.workers.sandbox import Limits, Sandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or sandbox.available() != "",
                                reason="guards run where root starts sandboxes under uids of their own")


def _sleeper(uid: int) -> subprocess.Popen:
    return subprocess.Popen([*drop(uid), sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def _of(proc: subprocess.Popen) -> list[int]:
    """The sandbox's processes running as its leased uid, found while it holds the lease: once it is given back,
    another test's sandbox may lease the same uid at once (a measured suite run saw one)."""
    return [p for p in descendants(proc.pid) if alive(p) and _uid(p) == proc.lease.uid]


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _gone(proc: subprocess.Popen, within: float = 5.0) -> bool:
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_closing_its_pipe_kills_every_process_of_its_uid_and_no_other() -> None:
    mine, other = uids.lease(), uids.lease()
    procs = [_sleeper(mine.uid), _sleeper(mine.uid), _sleeper(other.uid)]
    try:
        watch = guard.start(mine.uid)
        time.sleep(0.5)
        assert all(p.poll() is None for p in procs), "the guard killed before its pipe closed"
        watch.close()
        assert watch.proc.returncode == 0
        assert _gone(procs[0]) and _gone(procs[1]), "a process of the guard's uid outlived it"
        assert procs[2].poll() is None, "the guard killed a process of another uid"
    finally:
        for p in procs:
            p.kill()
            p.wait()
        mine.release()
        other.release()


def test_a_sandbox_that_ended_leaves_no_guard_and_no_process_of_its_uid() -> None:
    code = "import sys, time; print('ready', flush=True); sys.stdin.read(); print('done')"
    proc = Sandbox(Limits()).popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    watch, mine = proc.guard, _of(proc)
    assert watch is not None and alive(watch.proc.pid) and mine
    assert proc.communicate(timeout=60)[0] == b"done\n"
    assert watch.proc.returncode == 0 and wait_gone(mine, 5), [p for p in mine if alive(p)]


def test_end_leaves_no_guard_and_no_process_of_its_uid() -> None:
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print('ready', flush=True); time.sleep(60)"
    proc = Sandbox(Limits()).popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    watch, mine = proc.guard, _of(proc)
    assert len(mine) == 2  # the command and its child
    sandbox.end(proc)
    # SIGKILL is sent by the time the guard has exited; a killed process may take a moment more to exit (CI's run saw
    # both still running right after), and never runs its own code again
    assert watch.proc.returncode == 0 and wait_gone(mine, 5), [p for p in mine if alive(p)]
