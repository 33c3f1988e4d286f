"""``leakbed deploy-local`` for real: on 127.0.0.1 a SuperLink with TLS and SuperNode authentication,
3 SuperNodes (one per user), 2 gRPC attack workers and the ServerApp; /metrics scraped over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

from leakbed.core.layout import RunLayout
from leakbed.deploy_local import Deployment, scrape, value
from leakbed.workers import uids
from tests.integration.leftovers import Witness
from tests.integration.procs import VENV_BIN, Procs, flower_env, free_port, wait_until

OVERRIDES = [
    "data.synthetic.users=3",
    "data.synthetic.examples_per_user=40",
    "fl.rounds=2",
    "fl.fraction_train=1.0",
    'split.priors=["random"]',
    'attack.suite=["svm", "knn", "bias-labels"]',  # and the example plugin's attack ...
    'defenses=[{name="hide-bias", users=["user0"]}]',  # ... and defense (tests/plugins)
    "audit.canaries=16",  # the privacy audit's canaries beside the SuperNodes' replies (no DP defense: no finite ε)
]


def _finished(url: str) -> dict | None:
    try:
        samples = scrape(url, timeout=2)
    except (OSError, ValueError):
        return None
    return samples if value(samples, "leakbed_run_finished", prior="random") == 1 else None


@pytest.mark.slow
def test_deploy_local_tls_auth_three_supernodes_two_workers(
    tmp_path: Path, procs: Procs, example_plugin: Path, witness: Witness
) -> None:
    """The deployment runs a third-party plugin as it runs the built-in attacks: installed with pip, its attack in
    the sandbox behind the remote workers, its defense on the SuperNode of the user who adopts it, its scorer in a
    scoring sandbox of the ServerApp's host (the referee's process stays plugin-free). Once it has finished, nothing
    it started is left (its attack workers ended as a worker ends: a stop signal, exit 0)."""
    out, port = tmp_path / "deploy", free_port()
    sets = [arg for o in OVERRIDES for arg in ("--set", o)]
    # --hold: /metrics stays up this long after the run; deploy-local (1 s polls) and this test (0.5 s) read it within
    # a few seconds, and a longer hold only delays the end
    cmd = [str(VENV_BIN / "leakbed"), "deploy-local", *sets, "--out", str(out), "--metrics-port", str(port), "--hold", "10"]
    cli = procs.start("deploy-local", cmd, witness.env(flower_env(tmp_path / "unused-home")))
    url = f"http://127.0.0.1:{port}/metrics"
    final: dict = {}
    wait_until(lambda: bool(final.update(_finished(url) or {}) or final), 420, "run_finished on /metrics", procs)

    # the scrape: round count and the attack's AP, as the dashboard sees them
    assert value(final, "leakbed_round", prior="random") == 2
    assert value(final, "leakbed_rounds_planned", prior="random") == 2
    assert value(final, "leakbed_updates_tapped_total", prior="random") == 6
    assert value(final, "leakbed_updates_analysed_total", prior="random") == 6
    for attack in ("svm", "knn"):  # labelled with the run's defense
        ap = value(final, "leakbed_attack_ap", attack=attack, prior="random", world="closed", defense="hide-bias")
        assert ap is not None and 0.0 < ap <= 1.0, (attack, ap)
    metrics = json.loads((RunLayout(out / "run").results("random") / "metrics.json").read_text())
    assert metrics["attackers"]["svm"]["ap"] == pytest.approx(value(final, "leakbed_attack_ap", attack="svm", prior="random"))
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

    # TLS with a private CA, every SuperNode's key registered, attack work done by the 2 external workers
    assert (out / "certs" / "ca.crt").is_file() and (out / "certs" / "server.pem").is_file()
    # ... and the attack workers served over mutual TLS: each verified by the pool against that CA, and each
    # serving only the pool's certificate of the same CA
    assert (out / "certs" / "worker.pem").is_file() and (out / "certs" / "pool.pem").is_file()
    gateways = [(out / "logs" / f"attack-worker-{w}.log").read_text() for w in range(2)]
    assert all("(mutual TLS, sandboxed lanes, store root " in log for log in gateways), gateways
    # ... the attack code in the sandboxes behind each: one per lane, the sandbox user, its own PID namespace (pid 1)
    # as root, a uid leased for each sandbox alone (workers.uids)
    said = re.compile(r"\(uid (\d+), pid 1\)" if os.geteuid() == 0 else r"pid 1\)")
    for w in range(2):
        lanes = {p.name: p.read_text() for p in (out / "logs" / f"attack-worker-{w}").glob("*.log")}
        assert lanes and all(said.search(text) for text in lanes.values()), lanes
        if os.geteuid() == 0:
            assert all(uids.in_range(int(said.search(text)[1])) for text in lanes.values()), lanes
    experiment = (out / "experiment.toml").read_text()
    for key, name in (("tls_root_cert", "ca.crt"), ("tls_cert", "pool.pem"), ("tls_key", "pool.key")):
        assert f'{key} = "{out / "certs" / name}"' in experiment
    for i in range(3):
        assert "registered successfully" in (out / "logs" / f"register-{i}.log").read_text()
    assert metrics["pool"]["worker_restarts"] == 0, metrics["pool"]
    # a lane per attack and prior: the shadow lanes (workers.count of them) trained both rounds, whole, between them;
    # each attack lane fitted once
    tasks = metrics["pool"]["tasks_by_worker"]
    shadow = {k: v for k, v in tasks.items() if k.startswith("random/shadow.training")}
    assert metrics["pool"]["shadow_lanes"] == 2 and sum(shadow.values()) == 2, tasks
    assert set(shadow) <= {"random/shadow.training", "random/shadow.training.2"}, tasks
    assert {k: v for k, v in tasks.items() if k not in shadow} == {"random/knn": 1, "random/svm": 1, "random/bias-labels": 1}
    assert not metrics["pool"]["errors"], metrics["pool"]["errors"]
    layout = RunLayout(out / "run")
    assert (layout.store("random") / "anon").is_dir(), "the external workers filed nothing in the run's store"
    assert not (layout.root / "attack-worker-logs").exists(), "the ServerApp spawned local workers"
    rounds_log = metrics["rounds_log"]
    assert all(rounds_log[r]["received"] == 3 and rounds_log[r]["failed"] == 0 for r in ("1", "2")), rounds_log

    plugin = metrics["plugin_scored"]["bias-labels"]  # its own scorer's numbers: apart from the referee's, marked
    assert plugin["updates"] == 6 and 0.0 <= plugin["accuracy"] <= 1.0 and plugin["chance"] > 0, plugin
    assert value(final, "leakbed_attack_x_chance", attack="bias-labels", prior="random", scorer="plugin") == pytest.approx(
        plugin["x_chance"])
    assert metrics["defenses"] == [{"name": "hide-bias", "fraction": 1.0, "users": ["user0"], "suffix": ".bias"}]
    assert metrics["defending_users"] == 1
    # the audit ran in the deployment's ServerApp: in metrics.json and on /metrics, its canaries never tapped (6 above)
    audit = metrics["audit"]
    assert audit["candidates"] == 16 and audit["rounds_observed"] == 2 and audit["epsilon_accountant"] is None
    emp = value(final, "leakbed_privacy_epsilon", prior="random", estimate="emp", view="all-iterates")
    assert emp == pytest.approx(audit["all iterates"]["epsilon_emp"]) and emp > 1.0
    assert cli.popen.wait(timeout=300) == 0, procs.tails()
    output = cli.stdout.read_text()
    assert "[random] finished after round 2" in output and "svm AP" in output, output
    # a finished deployment leaves nothing: no process (SuperLink, SuperNodes, ClientApps, workers, their lanes), no
    # temporary folder (its own nor the processes' TMPDIR, OUT/tmp), no socket, no port listened on
    witness.check(out)
    assert not (out / "tmp").exists(), sorted(p.name for p in (out / "tmp").iterdir())
    for p in (port, *_ports(out / "experiment.toml")):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", p)) != 0, f"something still listens on port {p}"


def _ports(experiment: Path) -> list[int]:
    """The attack workers' ports, as the deployment wrote them into the ServerApp's config."""
    return [int(a.rsplit(":", 1)[1]) for a in tomllib.loads(experiment.read_text())["workers"]["addresses"]]


def test_a_finished_flwr_run_is_not_a_dead_process(tmp_path: Path) -> None:
    """``flwr-run-<prior>`` may exit 0 (the next prior's run follows); any other exit is a failure."""
    dep = Deployment(tmp_path, dict(os.environ))
    try:
        dep.start("flwr-run-random", [sys.executable, "-c", "pass"]).wait(timeout=60)
        dep.start("attack-worker-0", [sys.executable, "-c", "import time; time.sleep(60)"])
        assert dep.check_alive() == ""  # a finished run and a live worker
        dep.start("flwr-run-chrono", [sys.executable, "-c", "raise SystemExit(3)"]).wait(timeout=60)
        assert dep.check_alive().startswith("flwr-run-chrono exited with code 3")
        dep.procs.pop("flwr-run-chrono")
        dep.start("supernode-0", [sys.executable, "-c", "pass"]).wait(timeout=60)
        assert dep.check_alive().startswith("supernode-0 exited with code 0")
    finally:
        dep.stop(grace=5)
