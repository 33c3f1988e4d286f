"""The sandbox of attack workers (``workers.sandbox``): what a sandboxed process sees, what it is, its limits,
and ``leakbed sandbox-run``. The red team's break-out probes are in ``tests/redteam``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.processes import alive, descendants
from leakbed.cli import main as leakbed_main
from workers import sandbox
from workers.sandbox import Limits, Sandbox

LOOK = """
import json, os, pathlib, sys
out = {
    "parents": {str(p): sorted(os.listdir(p)) for p in pathlib.Path.cwd().parents},
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "env": sorted(os.environ),
    "referee_importable": __import__("importlib.util").util.find_spec("referee") is not None,
    "attacks_importable": __import__("importlib.util").util.find_spec("attacks") is not None,
    "secret": os.path.exists(sys.argv[1]),
    "uid": os.getuid(),
}
pathlib.Path("seen.json").write_text(json.dumps(out))
"""


def _run(store: Path, argv: list[str], limits: Limits | None = None, **kw) -> subprocess.CompletedProcess:
    proc = Sandbox(store, limits or Limits()).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(), err.decode())


def test_available_here():
    assert sandbox.available() == "", sandbox.available()


def test_a_sandboxed_process_sees_its_store_and_nothing_else_of_the_run(tmp_path, monkeypatch):
    secret = tmp_path / "run" / "referee" / "random" / "truth.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"update_id": "a", "user_id": "alice"}\n')
    (tmp_path / "run" / "config.toml").write_text("seed = 7\n")
    store = tmp_path / "run" / "attack-store"
    store.mkdir()
    monkeypatch.setenv("LEAKBED_SECRET_SEED", "7")
    done = _run(store, [sys.executable, "-c", LOOK, str(secret)])
    assert done.returncode == 0, done.stderr
    seen = json.loads((store / "seen.json").read_text())
    assert seen["secret"] is False
    assert seen["parents"][str(tmp_path / "run")] == ["attack-store"]  # no referee/, no config.toml beside it
    assert seen["procs"] == [1, 2]  # its own PID namespace: bwrap's init and itself, no server, no other worker
    assert "LEAKBED_SECRET_SEED" not in seen["env"] and "HOME" in seen["env"]
    assert seen["attacks_importable"] and not seen["referee_importable"]
    assert seen["uid"] == (sandbox.SANDBOX_UID if os.geteuid() == 0 else os.getuid())


def test_without_the_sandbox_the_same_look_finds_the_truth(tmp_path):
    """The check can fail: unsandboxed, the same process sees the referee's folder and the secret."""
    secret = tmp_path / "run" / "referee" / "random" / "truth.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text("{}\n")
    store = tmp_path / "run" / "attack-store"
    store.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", LOOK, str(secret)], cwd=store, check=True, timeout=60)
    seen = json.loads((store / "seen.json").read_text())
    assert seen["secret"] is True and "referee" in seen["parents"][str(tmp_path / "run")]


@pytest.mark.skipif(os.geteuid() != 0, reason="the host-side uid mapping of the privileged mode")
def test_the_host_sees_an_unprivileged_user_without_capabilities(tmp_path):
    """As root, bwrap builds the sandbox without a user namespace and setpriv drops to nobody: seen from
    the host (not only from inside) the process is uid 65534 with no capabilities. (A user namespace made
    by root maps the sandbox's uid onto host root.)"""
    proc = Sandbox(tmp_path, Limits()).popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        inner = []
        while time.monotonic() < deadline and not inner:
            inner = [p for p in descendants(proc.pid) if Path(f"/proc/{p}/comm").read_text().startswith("python")]
            time.sleep(0.05)
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{inner[0]}/status").read_text().splitlines())
        assert status["Uid"].split() == ["65534"] * 4 and status["Gid"].split() == ["65534"] * 4
        assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == int(status["CapBnd"], 16) == 0
        assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
        assert Path(f"/proc/{inner[0]}/uid_map").read_text().split()[:2] == ["0", "0"]  # no user namespace of its own
    finally:
        proc.kill()
        proc.wait()


def test_it_dies_with_its_spawner(tmp_path):
    spawner = (
        "import subprocess, sys, time, pathlib\n"
        "from workers.sandbox import Sandbox\n"
        f"p = Sandbox(pathlib.Path({str(tmp_path)!r})).popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True)
    bwrap = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while len(descendants(bwrap)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    inner = descendants(bwrap)
    assert inner, "the sandboxed process did not start"
    parent.kill()
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in [bwrap, *inner]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in [bwrap, *inner])


@pytest.mark.parametrize(
    ("limits", "code", "says"),
    [
        (Limits(memory_mb=512), "x = bytearray(1 << 30)", "MemoryError"),
        (
            Limits(processes=64),
            "import os, threading, time\nts = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(200)]\n"
            "[t.start() for t in ts]",
            "can't start new thread",
        ),
        (Limits(file_size_mb=1), "open('big', 'wb').write(b'x' * (2 << 20))", "File too large"),
        (Limits(tmp_mb=16), "open('/tmp/big', 'wb').write(b'x' * (32 << 20))", "No space left on device"),
    ],
    ids=["memory", "processes", "file-size", "tmp-size"],
)
def test_a_sandboxed_process_cannot_go_over_its_limits(tmp_path, limits, code, says):
    done = _run(tmp_path, [sys.executable, "-c", code], limits)
    assert done.returncode != 0 and says in done.stderr, done.stderr[-500:]


def test_within_its_limits_the_same_work_succeeds(tmp_path):
    """The limits above are what failed, not the work: with the defaults each passes."""
    code = (
        "import threading, time\nx = bytearray(1 << 30)\nopen('big', 'wb').write(b'x' * (2 << 20))\n"
        "ts = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(200)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]"
    )
    done = _run(tmp_path, [sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr[-500:]


def test_sandbox_run_passes_exit_code_and_output_through(tmp_path, capfd):
    code = "import os, sys; print('out', os.getuid()); print('err', file=sys.stderr); open('made', 'w').write('x'); sys.exit(7)"
    assert leakbed_main(["sandbox-run", "--store", str(tmp_path), "--", sys.executable, "-c", code]) == 7
    out, err = capfd.readouterr()
    uid = sandbox.SANDBOX_UID if os.geteuid() == 0 else os.getuid()
    assert out.strip() == f"out {uid}" and err.strip() == "err"
    assert (tmp_path / "made").read_text() == "x"  # the store is its working directory, read-write


@pytest.mark.parametrize("case", ["missing", "not-a-folder", "no-command"])
def test_sandbox_run_refuses_bad_input_in_one_line(tmp_path, capfd, case):
    (tmp_path / "file").write_text("keep")
    store = {"missing": tmp_path / "nope", "not-a-folder": tmp_path / "file", "no-command": tmp_path}[case]
    command = [] if case == "no-command" else ["--", "sh", "-c", "touch /tmp/x"]
    assert leakbed_main(["sandbox-run", "--store", str(store), *command]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("leakbed: error:")
    assert (tmp_path / "file").read_text() == "keep" and not (tmp_path / "nope").exists()


def test_a_store_its_caller_cannot_write_is_refused(tmp_path, monkeypatch):
    """Root may write anywhere, so the refusal is shown by the permission check itself."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ValueError, match="not writable"):
        sandbox.check_store(tmp_path)
