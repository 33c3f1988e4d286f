"""The red team tries to break out of the sandbox (``attacks.breakout`` through ``leakbed sandbox-run``), with real
services listening on the host as in a run: a SuperLink, a metrics endpoint, a sandboxed attack pool with a live lane,
an abstract Unix socket. Every probe must hold; the same probes run unsandboxed find ways out, so they can fail.

``leakbed sandbox-run --store DIR -- CMD`` runs CMD in exactly the sandbox a lane gets: DIR read-only at
``/leakbed/inputs``, a writable tmpfs of its own at ``/leakbed/out`` (its working directory). The probes are told
``--store /leakbed/out``: the one folder they may write.

``pytest -m redteam`` runs the red team alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from leakbed.attacks import breakout
from leakbed.core.data import federation
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import attack_keys, build_model
from leakbed.core.processes import free_port
from leakbed.core.records import AnonymousUpdate, RoundSnapshot
from leakbed.core.training import TrainConfig, state_arrays
from leakbed.workers import AttackPool
from leakbed.workers.introspect import Introspector
from leakbed.workers.pool import Fit
from leakbed.workers.sandbox import Limits
from tests.conftest import tiny_config
from tests.integration.procs import Procs, flower_env, wait_until
from tests.redteam.hostfacts import abstract_unix_sockets, listening_tcp_ports, probe_args

pytestmark = [pytest.mark.redteam, pytest.mark.slow]
BIN = Path(sys.executable).parent


def _knowledge() -> tuple[AttackerKnowledge, dict[str, np.ndarray], list[str], dict]:
    """The attacker's knowledge of a tiny federation, the initial model's arrays, its attack keys, the train config."""
    cfg = tiny_config()
    fed = federation(cfg, "random")
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, ["final"])
    knowledge = AttackerKnowledge(fed.prior(), replace(fed.corpus, users={}), cfg.model, keys, seed=0, device="cpu")
    return knowledge, state_arrays(model), keys, TrainConfig.of(cfg.fl).to_config()


def _updates(rnd: int, n: int, dim: int) -> list[AnonymousUpdate]:
    rng = np.random.default_rng(rnd)
    return [AnonymousUpdate(f"{rnd:02d}{i:014x}", rnd, (v := rng.normal(size=dim).astype(np.float32)) / np.linalg.norm(v), 10)
            for i in range(n)]  # fmt: skip


@pytest.fixture
def run_on_host(tmp_path: Path):
    """A run folder with a truth file, and the services of a run listening on this host, a sandboxed lane among them."""
    from leakbed.core import telemetry

    run = tmp_path / "run"
    truth = run / "referee" / "random" / "truth.jsonl"
    truth.parent.mkdir(parents=True)
    truth.write_text('{"update_id": "0a", "user_id": "alice", "round": 1}\n')
    store_root = run / "attack-store"
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
    knowledge, arrays, keys, train = _knowledge()
    declarations = Introspector(Limits(), cache=tmp_path / "declarations").declarations(["knn"])
    pool = AttackPool(knowledge, store_root, declarations=declarations, params={"knn": dict(declarations["knn"].params_defaults)},
                      outputs=run / "random" / "outputs", count=2, queue_size=4, submit_timeout=10, run_id="random",
                      sandbox=Limits(), log_dir=run / "attack-logs")  # fmt: skip
    try:
        wait_until(lambda: port in listening_tcp_ports(), 60, "the SuperLink", procs)
        dim = sum(arrays[k].size for k in keys)
        pool.submit_round(RoundSnapshot(1, arrays, train))  # the shadow lane starts, and stays up for the next round
        pool.submit_updates(_updates(1, 3, dim))
        assert pool.drain(300) and not pool.stats.errors, pool.stats.errors
        lanes = [lane.handle.pid for lane in pool._lanes.values() if lane.handle is not None]
        assert lanes, "no lane is running"
        yield {"run": run, "store": store_root / "random", "truth": truth, "pool": pool, "lanes": lanes,
               "ports": [port, metrics.port], "arrays": arrays, "train": train, "dim": dim}  # fmt: skip
    finally:
        pool.close()
        abstract.close()
        metrics.close()
        procs.stop_all()


def _probe(store: Path, argv: list[str], sandboxed: bool, cwd: Path) -> dict:
    command = [sys.executable, "-m", "leakbed.attacks.breakout", *argv]
    if sandboxed:
        command = [str(BIN / "leakbed"), "sandbox-run", "--store", str(store), "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in [folder, *folder.rglob("*")]}


def test_every_way_out_holds_in_the_sandbox(run_on_host, tmp_path):
    run, store = run_on_host["run"], run_on_host["store"]
    outside = [run, run / "referee", store, tmp_path, Path("/leakbed/inputs")]
    pids = [os.getpid(), os.getppid(), *run_on_host["lanes"]]
    argv = probe_args(secret=[run_on_host["truth"], Path(__file__)], outside=outside, pids=pids)
    assert set(run_on_host["ports"]) <= set(listening_tcp_ports()) and abstract_unix_sockets()  # something to reach
    before = {**_listing(run / "referee"), **_listing(store)}
    found = _probe(store, [*argv, "--store", "/leakbed/out", "--scratch", "/tmp"], sandboxed=True, cwd=tmp_path)
    assert set(found) == set(breakout.PROBES)
    broken = {name: p["detail"] for name, p in found.items() if not p["held"]}
    assert not broken, broken
    # what it wrote (its one allowed file, in its own tmpfs, and its /tmp) is gone with the sandbox: the host is as it was
    assert not [p for p in run.rglob(".leakbed-breakout*")] and not (tmp_path / ".leakbed-breakout").exists()
    assert not (Path("/tmp") / breakout.PRIVATE_MARKER).exists()
    assert {**_listing(run / "referee"), **_listing(store)} == before, "a file of the truth or the store changed"
    # the lane it might have reached is alive and serves its pool: the next round, then a fit, as usual
    pool = run_on_host["pool"]
    pool.submit_round(RoundSnapshot(2, run_on_host["arrays"], run_on_host["train"]))
    pool.submit_updates(_updates(2, 3, run_on_host["dim"]))
    assert pool.drain(300) and pool.stats.analysed == 6 and pool.stats.rounds_analysed == 2, pool.stats
    assert [lane.handle.pid for lane in pool._lanes.values() if lane.handle is not None][:1] == run_on_host["lanes"][:1]
    pool.fit(["knn"], timeout=300)
    assert pool.stats.fitted("knn") and not pool.stats.errors, pool.stats.errors
    assert pool.read_output(Fit("knn"))["scores"].shape == (6, 6)


def test_unsandboxed_the_same_probes_find_ways_out(run_on_host, tmp_path):
    """The probes can fail: run as this process's user, on this host, they see the truth, reach the host's
    ports and abstract sockets, and (as root) hold capabilities. Only probes harmless to the host are run."""
    argv = probe_args(secret=[run_on_host["truth"]], outside=[])
    only = ["capabilities", "no-new-privs", "host-tcp-ports", "abstract-sockets", "truth-file", "other-processes"]
    argv += ["--scratch", str(tmp_path), "--store", str(tmp_path), *(a for n in only for a in ("--only", n))]
    found = _probe(run_on_host["store"], argv, False, cwd=tmp_path)
    broken = {name for name, p in found.items() if not p["held"]}
    assert {"host-tcp-ports", "abstract-sockets", "truth-file", "no-new-privs", "other-processes"} <= broken, found
    if os.geteuid() == 0:
        assert "capabilities" in broken
