"""The testbed as real containers: `leakbed compose up`, runs submitted with `flwr run`, faults, TLS, `down`.

Docker or Podman (through its Docker API, as `.ci/run` sets up) builds the images (official base,
or the Debian one where no registry answers) and runs SuperLink, the ServerApp's SuperExec,
3 SuperNodes with their SuperExecs, 2 attack workers (no network, hardened; the red team tries to break
out of one) and Prometheus, each a container. A missing
engine skips here and fails in CI. The images are built once (layer cache); one stack, with the TLS overlay
(TLS on the SuperLink, SuperNode authentication), serves every test of the module: the plain stack, without
the overlay, is the compose tutorial's (tests/docs/test_tutorials.py::TestComposeTutorial).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakbed import compose, images, stack
from leakbed.attacks.breakout import PROBES
from leakbed.core.config import load_config
from leakbed.engine import Engine, EngineError, find_engine
from leakbed.package_data import config_file
from leakbed.simulate import simulate
from tests.deploy.test_dashboard import dashboard, panels, substitute
from tests.deploy.tools import missing
from tests.integration.procs import VENV_BIN, flower_env, free_ports
from tests.redteam.hostfacts import abstract_unix_sockets, host_addresses, listening_tcp_ports

pytestmark = [pytest.mark.containers, pytest.mark.slow]

SUPERNODES, WORKERS, ROUNDS = 3, 2, 3
# What this test's runs change from the quickstart (besides leakbed compose's own overrides):
# every device trains every round, so the sampled cohorts do not depend on the SuperLink's node ids.
SMALL = [
    "data.synthetic.examples_per_user=60",
    f"fl.rounds={ROUNDS}",
    "fl.fraction_train=1.0",
    'split.priors=["random"]',
    'attack.suite=["mlp","svm","knn","matching","bias-labels"]',  # bias-labels, hide-bias: the example plugin
    "attack.params.mlp.epochs=60",
    'defenses=[{name="hide-bias",users=["user0"]}]',  # (tests/plugins), installed in the app image
]
CONFIG = "quickstart"  # a built-in config, by name: the image has only the installed package
# The faults run also feeds every dashboard panel: metadata (and its fusions), linkage, and one
# reconstruction attack (per-sample accuracy; one local step of batch 8, a property per example).
EVERY_PANEL = [
    'attack.suite=["mlp","svm","knn","matching","metadata","linkage","feature-inference"]',
    "data.synthetic.property_rate=0.5",
    "fl.local_steps=1",
    "fl.batch_size=8",
    "attack.params.feature-inference.updates=2",
    "audit.canaries=16",  # the privacy audit in the containers' ServerApp (its dashboard panel)
]
HOLD_S = 20  # the ServerApp's /metrics stays up this long after a run, for Prometheus's last scrapes


@pytest.fixture(scope="module")
def engine() -> Engine:
    try:
        return find_engine()
    except EngineError as err:
        missing("a container engine", str(err))
        raise


@pytest.fixture(scope="module")
def chosen(engine: Engine, example_plugin: Path) -> images.Images:
    """The images, the app image with the example plugin package installed (``leakbed compose build --plugin``)."""
    chosen, why = images.choose("auto")
    start = time.monotonic()
    timings = images.build(engine, chosen, say=lambda m: None, plugins=[example_plugin])
    print(f"\n[containers] {why}; build {time.monotonic() - start:.0f} s: {timings}")
    return chosen


def _stack(project: str, tls: bool) -> stack.Stack:
    link, prom, graf = free_ports(3)
    return stack.Stack(project, SUPERNODES, WORKERS, tls, superlink_port=link, prometheus_port=prom, grafana_port=graf)


@pytest.fixture(scope="module")
def live(engine: Engine, chosen: images.Images) -> Iterator[stack.Stack]:
    """The module's stack, with the TLS overlay: every run of the module goes over TLS to authenticated SuperNodes."""
    s = _stack("leakbed-ct", tls=True)
    stack.down(engine, s)
    stack.up(engine, s, base=chosen.base, build=False, say=lambda m: None)
    yield s
    stack.down(engine, s)


def submit(engine: Engine, s: stack.Stack, name: str, *extra: str, timeout: float = 900) -> tuple[float, str]:
    """``flwr run`` as the user would (the printed run config plus this test's small run); returns
    (when it returned, its output)."""
    overrides = [*SMALL, *compose.overrides(SUPERNODES, WORKERS, s.tls), f"telemetry.hold_seconds={HOLD_S}", *extra]
    value = f"config='{CONFIG}' set='{' '.join(overrides)}' out-dir='/data/runs/{name}' prior='random'"
    cmd = [str(VENV_BIN / "flwr"), "run", str(stack.app()), stack.CONNECTION, "--stream", "--run-config", value]
    out = subprocess.run(cmd, env=flower_env(s.flwr_home), capture_output=True, text=True, timeout=timeout, check=False)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "Successfully started run" in text, text[-4000:] + logs(engine, s)
    return time.time(), text


def logs(engine: Engine, s: stack.Stack, tail: int = 40) -> str:
    out = stack.run_compose(engine, s, "logs", "--no-color", "--tail", str(tail), check=False)
    return "\n--- compose logs ---\n" + (out.stdout + out.stderr)[-8000:]


def fetch_run(engine: Engine, s: stack.Stack, name: str, dest: Path) -> dict:
    """The run folder from the leakbed-data volume; returns its prior's metrics.json."""
    stack.run_compose(engine, s, "cp", f"serverapp:/data/runs/{name}", str(dest))
    return json.loads((dest / "random" / "metrics.json").read_text())


def exec_in(engine: Engine, s: stack.Stack, service: str, *argv: str) -> str:
    out = stack.run_compose(engine, s, "exec", "-T", service, *argv, check=False)
    return out.stdout


def container(engine: Engine, s: stack.Stack, service: str) -> str:
    return stack.run_compose(engine, s, "ps", "-q", service).stdout.strip()


def prometheus_query(s: stack.Stack, expr: str, at: float) -> list[dict]:
    query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"http://127.0.0.1:{s.prometheus_port}/api/v1/query?{query}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_a_run_in_containers_equals_leakbed_run(engine: Engine, live: stack.Stack, tmp_path: Path) -> None:
    submit(engine, live, "first", "telemetry.hold_seconds=0")  # read from its folder: no last scrape to wait for
    deployed = fetch_run(engine, live, "first", tmp_path / "first")
    assert deployed["users"] == SUPERNODES and deployed["rounds"] == ROUNDS
    assert deployed["pool"]["tapped"] == deployed["pool"]["analysed"] == SUPERNODES * ROUNDS
    assert (tmp_path / "first" / "report.md").is_file()
    assert deployed["attack_side"]["remote_workers"] is True, deployed["attack_side"]

    # the same config and seed in the Ray simulation (without the deployment's overrides: workers' addresses, telemetry)
    cfg = load_config(config_file(CONFIG), [*SMALL, f"data.synthetic.users={SUPERNODES}"])
    simulated = simulate(cfg, "random", tmp_path / "sim")
    for attacker, m in simulated["attackers"].items():
        d = deployed["attackers"][attacker]
        for key in ("ap", "chance_ap", "top1", "top5"):
            assert math.isclose(d[key], m[key], abs_tol=1e-9), (attacker, key, d[key], m[key])
    assert deployed["suite"]["matching"]["ap"] == pytest.approx(simulated["suite"]["matching"]["ap"], abs=1e-9)
    # the third-party plugin in the containers: its attack in the worker containers, its defense on user0's device
    assert deployed["plugin_scored"]["bias-labels"] == simulated["plugin_scored"]["bias-labels"]
    assert deployed["plugin_scored"]["bias-labels"]["updates"] == SUPERNODES * ROUNDS and deployed["defending_users"] == 1
    assert deployed["utility"].keys() == simulated["utility"].keys()
    for rnd, u in simulated["utility"].items():
        assert deployed["utility"][rnd]["loss"] == pytest.approx(u["loss"], abs=1e-6), rnd


def test_attack_workers_cannot_see_the_truth(engine: Engine, live: stack.Stack) -> None:
    for w in range(WORKERS):
        service = f"attack-worker-{w}"
        mounts = json.loads(engine.run("inspect", container(engine, live, service), "--format", "{{json .Mounts}}").stdout)
        volumes = {m.get("Name", "") for m in mounts} | {m.get("Destination", "") for m in mounts}
        assert not any("referee" in v or "leakbed-data" in v for v in volumes), mounts
        assert any(m.get("Destination") == "/attack-store" for m in mounts), mounts
        found = exec_in(
            engine, live, service, "find", "/", "-xdev", "(", "-name", "truth.jsonl", "-o", "-name", "update-ids.key", ")"
        )
        assert found.strip() == "", found
        stores = exec_in(engine, live, service, "find", "/attack-store", "-maxdepth", "3", "-name", "knowledge.json")
        assert stores.strip(), "the worker's store holds the run's knowledge (so find did look)"
    # the truth is there, in the ServerApp's container only
    assert exec_in(engine, live, "serverapp", "find", "/referee", "-name", "truth.jsonl").strip()


@pytest.mark.redteam
def test_an_attack_worker_container_cannot_break_out(engine: Engine, live: stack.Stack) -> None:
    """The break-out probes of ``attacks.breakout``, run where attack code runs in a live attack-worker container: in
    a lane's bubblewrap sandbox inside it (``leakbed sandbox-run``, the lane's own sandbox over the read-only store),
    under the container's user and limits: no service of the stack answers (by name, on its port), no host port,
    nothing off the machine, no capability, no mount, no user namespace, no /proc/sys, no truth, not the gateway's
    socket. The same probes on the host find ways out (``tests/redteam/test_breakout.py``). The gateway itself (trusted
    code, the outer layer) holds all but what bubblewrap needs to build a lane: a user namespace and mounts in it. It
    needs a run's truth to look for: when the stack holds none yet, it submits a small run of its own first
    (``pytest -m redteam`` runs it alone)."""
    services = ["superlink:9093", f"serverapp:{compose.SERVER_METRICS_PORT}", "prometheus:9090", "attack-worker-1:9500"]
    services += [f"supernode-{i}:{compose.RUNTIME_PORT + i}" for i in range(SUPERNODES)]
    argv = ["--all-ports"]
    argv += [a for svc in services for a in ("--service", svc)]
    argv += [a for addr in host_addresses() for a in ("--host-address", addr)]
    argv += [a for name in abstract_unix_sockets() for a in ("--abstract", name)]
    argv += [a for port in listening_tcp_ports() for a in ("--port", str(port))]

    # the truth and run folders as they lie in the ServerApp's container (a run made them), the other worker's socket
    def run_files() -> list[str]:
        found = exec_in(engine, live, "serverapp", "find", "/referee", "/data", "-name", "*.jsonl", "-o", "-name", "*.toml")
        return found.split()

    secrets, made = run_files(), ""
    if not any(p.endswith("truth.jsonl") for p in secrets):  # no run in this stack yet: make one
        made = submit(engine, live, "redteam-breakout")[1][-3000:] + logs(engine, live)
        secrets = run_files()
    assert any(p.endswith("truth.jsonl") for p in secrets), f"no truth to look for: {secrets}\n{made}"
    argv += [a for path in [*secrets, "/run/attack-workers/1/worker.sock"] for a in ("--secret", path)]  # the other worker's
    probe = ["python3", "-m", "leakbed.attacks.breakout"]
    # the lane's sandbox; its own gateway's socket is a secret too
    lane = ["leakbed", "sandbox-run", "--store", "/attack-store", "--", *probe, "--store", "/leakbed/out",
            "--scratch", "/leakbed/out", "--outside", "/leakbed/inputs", *argv,
            "--secret", "/run/leakbed/worker.sock"]  # fmt: skip
    out = exec_in(engine, live, "attack-worker-0", *lane)
    found = json.loads(out)
    assert set(found) == set(PROBES), out
    broken = {name: p["detail"] for name, p in found.items() if not p["held"]}
    assert not broken, broken
    assert "interfaces ['lo']" in found["off-machine"]["detail"]  # no network at all, not only no route
    # the gateway around the lanes (it serves /run/leakbed/worker.sock itself): what bubblewrap needs, nothing more
    gateway = ["python3", "-m", "leakbed.attacks.breakout", "--store", "/tmp", "--scratch", "/tmp", "--outside", "/attack-store"]
    found = json.loads(exec_in(engine, live, "attack-worker-0", *gateway, *argv))
    broken = {name: p["detail"] for name, p in found.items() if not p["held"]}
    assert set(broken) <= {"mount", "kernel-interfaces"}, broken
    assert broken.get("mount", "mount tmpfs: EPERM").startswith("mount tmpfs: EPERM"), broken  # no mount of its own
    if "kernel-interfaces" in broken:
        said = broken["kernel-interfaces"]
        assert said.count(": ok") == 1 and "unshare(net): ok" in said, said
    assert "interfaces ['lo']" in found["off-machine"]["detail"]  # no network at all, not only no route


def test_faults_are_survived_counted_and_caught_up(engine: Engine, live: stack.Stack, tmp_path: Path) -> None:
    """A SuperNode killed mid-run: the run finishes and counts the failure. An attack worker
    killed mid-run: its restart policy brings it back and analysed catches up with tapped."""
    result: dict[str, object] = {}

    def run() -> None:
        # a dead device is found by the SuperLink's heartbeats, or at the latest by the round's time limit
        try:
            result["end"], result["out"] = submit(engine, live, "faults", "fl.round_timeout=240", *EVERY_PANEL)
        except BaseException as err:  # noqa: BLE001 - said by the test's thread, below
            result["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    worker = container(engine, live, "attack-worker-1")
    try:  # the run's first round (once failed here, on a loaded machine, with nothing to say why)
        wait_for(lambda: _round(live) >= 1 or not thread.is_alive(), 600)
    except AssertionError as err:
        raise AssertionError(f"{err}: no round of the faults run ended{logs(engine, live)}") from None
    assert "error" not in result, result["error"]
    engine.run("kill", container(engine, live, "supernode-2"))  # a device gone for good
    crash(engine, worker)
    thread.join(900)
    assert "end" in result, "the run did not finish"
    metrics = fetch_run(engine, live, "faults", tmp_path / "faults")
    failed = sum(r["failed"] for r in metrics["rounds_log"].values())
    assert failed >= 1, metrics["rounds_log"]
    pool = metrics["pool"]
    assert pool["tapped"] == pool["analysed"] and pool["dropped"] == 0, pool
    report = (tmp_path / "faults" / "report.md").read_text()
    assert re.search(r"failed replies [1-9]", report), report
    restarted = int(engine.run("inspect", worker, "--format", "{{.RestartCount}}").stdout.strip() or 0)
    assert restarted >= 1, "the restart policy did not bring the crashed worker back"
    served = sum(n for where, n in pool["tasks_by_host"].items() if f"{compose.WORKER_SOCKETS}/1/" in where)
    assert pool["retries"] >= 1 or served >= 1, pool  # the crashed worker's lanes were retried or it served tasks
    assert metrics["audit"]["candidates"] == 16 and metrics["audit"]["rounds_observed"] >= 1, metrics["audit"]
    check_dashboard(live, float(result["end"]) - HOLD_S / 2)


def crash(engine: Engine, container_id: str) -> None:
    """SIGKILL the container's main process from the host, as a crash or the OOM killer would.
    ``podman kill`` counts as a stop by the user, after which no restart policy applies (Docker's
    rule for ``docker stop``), so it cannot show the policy at work."""
    pid = int(engine.run("inspect", container_id, "--format", "{{.State.Pid}}").stdout.strip())
    assert pid > 0, "the worker is not running"
    os.kill(pid, signal.SIGKILL)


def _round(s: stack.Stack) -> float:
    try:
        found = prometheus_query(s, "max(leakbed_round)", time.time())
    except OSError:
        return 0.0
    return float(found[0]["value"][1]) if found else 0.0


def wait_for(condition, timeout: float) -> None:  # noqa: ANN001 - a zero-argument predicate
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(2)
    raise AssertionError(f"not within {timeout:.0f}s")


def check_dashboard(s: stack.Stack, at: float) -> None:
    """Every panel's PromQL returns at least one series from the live Prometheus (no Grafana server
    can be installed here): each panel would show data."""
    doc = dashboard()
    variables = [v["name"] for v in doc["templating"]["list"]]
    empty = []
    for panel in panels(doc):
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables).replace("$__rate_interval", "1m")
            if not prometheus_query(s, expr, at):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "\n".join(empty)


def test_the_tls_overlay_authenticates_every_supernode(engine: Engine, live: stack.Stack) -> None:
    """The stack's SuperLink speaks TLS only, and admits the SuperNodes whose keys the overlay registered (every run of
    this module, the one above included, went through it)."""
    reg = stack.run_compose(engine, live, "logs", "--no-color", "register-supernodes", check=False).stdout
    assert f"registered {SUPERNODES} SuperNode keys" in reg, reg
    assert (live.certs / "ca.crt").is_file() and "root-certificates" in (live.flwr_home / "config.toml").read_text()
    with pytest.raises(OSError):  # no plain text on the SuperLink's port
        urllib.request.urlopen(f"http://127.0.0.1:{live.superlink_port}/health", timeout=10)  # noqa: S310


def test_down_leaves_nothing_behind(engine: Engine, live: stack.Stack) -> None:
    assert stack.down(engine, live) == []
    assert not live.folder.exists()


def test_docker_host_at_podman_is_still_podman(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user may point DOCKER_HOST at leakbed's Podman socket for their own docker commands; exported, the docker CLI
    reaches Podman, and leakbed must still treat the engine as Podman (seccomp profile by path, not by text)."""
    if engine.name != "podman":
        pytest.skip("Docker answers here: nothing to mistake for it")
    monkeypatch.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
    assert find_engine().name == "podman"
