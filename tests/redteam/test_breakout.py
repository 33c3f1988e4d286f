"""The red team tries to break out of the sandbox (``attacks.breakout`` through ``leakbed sandbox-run``), with
real services listening on the host as in a run: a SuperLink, a metrics endpoint, a sandboxed attack pool, an
abstract Unix socket. Every probe must hold; the same probes run unsandboxed find ways out, so they can fail.

``pytest -m redteam`` runs the red team alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attacks import breakout
from core.processes import free_port
from tests.integration.procs import Procs, flower_env, wait_until
from tests.redteam.hostfacts import abstract_unix_sockets, listening_tcp_ports, probe_args
from workers.sandbox import Limits

pytestmark = [pytest.mark.redteam, pytest.mark.slow]
BIN = Path(sys.executable).parent


@pytest.fixture
def run_on_host(tmp_path: Path):
    """A run folder with a truth file, and the services of a run listening on this host."""
    from core import telemetry
    from tests.attacks.test_pool import _knowledge

    run = tmp_path / "run"
    truth = run / "referee" / "random" / "truth.jsonl"
    truth.parent.mkdir(parents=True)
    truth.write_text('{"update_id": "0a", "user_id": "alice", "round": 1}\n')
    store = run / "attack-store"
    store.mkdir()
    procs = Procs(tmp_path / "logs")
    port = free_port("0.0.0.0")
    procs.start(
        "superlink",
        [str(BIN / "flower-superlink"), "--insecure", "--host", "0.0.0.0", "--port", str(port)]
        + ["--database", str(tmp_path / "l.db")],
        flower_env(tmp_path / "flwr"),
    )
    metrics = telemetry.start_http_server(0, "0.0.0.0")
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0leakbed-redteam-{os.getpid()}")
    abstract.listen()
    from workers import AttackPool

    knowledge, _, _ = _knowledge()
    pool = AttackPool(knowledge, str(store), workers=2, queue_size=4, submit_timeout=10, run_id="random", sandbox=Limits())
    try:
        wait_until(lambda: port in listening_tcp_ports(), 60, "the SuperLink", procs)
        wait_until(lambda: all(w.socket.exists() for w in pool.local), 60, "the attack workers")
        yield {"run": run, "store": store, "truth": truth, "pool": pool, "ports": [port, metrics.port]}
    finally:
        pool.close()
        abstract.close()
        metrics.close()
        procs.stop_all()


def _probe(store: Path, argv: list[str], sandboxed: bool) -> dict:
    command = [sys.executable, "-m", "attacks.breakout", *argv]
    if sandboxed:
        command = [str(BIN / "leakbed"), "sandbox-run", "--store", str(store), "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=store)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_way_out_holds_in_the_sandbox(run_on_host):
    run, store = run_on_host["run"], run_on_host["store"]
    sockets = [w.socket for w in run_on_host["pool"].local]
    argv = probe_args(secret=[run_on_host["truth"], *sockets, Path(__file__)], outside=[run, run / "referee", Path.cwd()])
    assert set(run_on_host["ports"]) <= set(listening_tcp_ports()) and abstract_unix_sockets()  # something to reach
    found = _probe(store, [*argv, "--scratch", "/tmp"], sandboxed=True)
    assert set(found) == set(breakout.PROBES)
    broken = {name: p["detail"] for name, p in found.items() if not p["held"]}
    assert not broken, broken
    # what it wrote stayed in the store or in its own /tmp
    outside = [p for p in run.rglob(".leakbed-breakout") if not p.is_relative_to(store)]
    assert not outside and not (Path.cwd() / ".leakbed-breakout").exists()
    assert (store / ".leakbed-breakout").exists() and not (Path("/tmp") / breakout.PRIVATE_MARKER).exists()
    # the workers it might have reached are alive and serve their pool
    pool = run_on_host["pool"]
    pool.submit_updates([breakout_update()])
    assert pool.drain(60) and pool.stats.analysed == 1 and not pool.stats.errors


def breakout_update():
    from core.records import AnonymousUpdate

    return AnonymousUpdate("00aa", 1, np.ones(4, np.float32) / 2, 5)


def test_unsandboxed_the_same_probes_find_ways_out(run_on_host, tmp_path):
    """The probes can fail: run as this process's user, on this host, they see the truth, reach the host's
    ports and abstract sockets, and (as root) hold capabilities. Only probes harmless to the host are run."""
    argv = probe_args(secret=[run_on_host["truth"]], outside=[])
    only = ["capabilities", "no-new-privs", "host-tcp-ports", "abstract-sockets", "truth-file", "other-processes"]
    found = _probe(run_on_host["store"], [*argv, "--scratch", str(tmp_path), *(a for n in only for a in ("--only", n))], False)
    broken = {name for name, p in found.items() if not p["held"]}
    assert {"host-tcp-ports", "abstract-sockets", "truth-file", "no-new-privs", "other-processes"} <= broken, found
    if os.geteuid() == 0:
        assert "capabilities" in broken
