"""The jail of locally spawned attack workers: the store root and nothing else of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attacks import jail
from core.processes import descendants

pytestmark = pytest.mark.skipif(bool(jail.available()) and not os.environ.get("CI"), reason=jail.available() or "")

LOOK = """
import json, os, pathlib, sys
out = {
    "parents": {str(p): sorted(os.listdir(p)) for p in pathlib.Path.cwd().parents},
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "env": sorted(os.environ),
    "argv": sys.argv,
    "referee_importable": __import__("importlib.util").util.find_spec("referee") is not None,
    "attacks_importable": __import__("importlib.util").util.find_spec("attacks") is not None,
    "secret": os.path.exists(sys.argv[1]),
}
pathlib.Path("seen.json").write_text(json.dumps(out))
"""


def _run_jailed(tmp_path: Path, argv: list[str]) -> dict:
    store = tmp_path / "run" / "attack-store"
    store.mkdir(parents=True)
    proc = subprocess.run(jail.jailed(argv, store), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LEAKBED_SECRET_SEED": "7"})
    assert proc.returncode == 0, proc.stderr
    return json.loads((store / "seen.json").read_text())


def test_available_here():
    assert jail.available() == "", jail.available()


def test_a_jailed_process_sees_its_store_and_nothing_else_of_the_run(tmp_path):
    secret = tmp_path / "run" / "referee" / "random" / "truth.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"update_id": "a", "user_id": "alice"}\n')
    (tmp_path / "run" / "config.toml").write_text("seed = 7\n")
    seen = _run_jailed(tmp_path, ["-c", LOOK, str(secret)])
    assert seen["secret"] is False
    run_dir = str(tmp_path / "run")
    assert seen["parents"][run_dir] == ["attack-store"]  # no referee/, no config.toml beside it
    assert seen["procs"] == [1]  # its own PID namespace: no server, no other worker
    assert "LEAKBED_SECRET_SEED" not in seen["env"] and "HOME" in seen["env"]
    assert seen["attacks_importable"] and not seen["referee_importable"]


def test_without_the_jail_the_same_look_finds_the_truth(tmp_path):
    """The check can fail: unjailed, the same process sees the referee's folder and the secret."""
    secret = tmp_path / "run" / "referee" / "random" / "truth.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text("{}\n")
    store = tmp_path / "run" / "attack-store"
    store.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", LOOK, str(secret)], cwd=store, check=True, timeout=60)
    seen = json.loads((store / "seen.json").read_text())
    assert seen["secret"] is True and "referee" in seen["parents"][str(tmp_path / "run")]


def test_the_jailed_worker_dies_with_its_spawner(tmp_path):
    store = tmp_path / "attack-store"
    store.mkdir()
    spawner = (
        "import subprocess, sys, time\n"
        "from attacks import jail\n"
        f"p = subprocess.Popen(jail.jailed(['-c', 'import time; time.sleep(120)'], __import__('pathlib').Path({str(store)!r})),"
        " preexec_fn=jail.die_with_parent)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True)
    unshare_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while not descendants(unshare_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    inner = descendants(unshare_pid)
    assert inner, "the jailed process did not start"
    parent.kill()
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() for p in [unshare_pid, *inner]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in [unshare_pid, *inner])
