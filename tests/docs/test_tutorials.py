"""Every tutorial runs: its ``<!-- run -->`` blocks are executed as written (at the small scale the page states),
and what the page says they show is checked against what they printed and wrote."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakbed import engine as engines
from leakbed import images, stack
from leakbed.core.processes import free_ports, terminate
from leakbed.engine import Engine
from tests.conftest import REPO
from tests.deploy import test_containers as containers
from tests.deploy.test_dashboard import dashboard, panels, substitute
from tests.docs.tutorials import run
from tests.integration.leftovers import Witness
from tests.integration.procs import find_pids, ray_alive_nodes, ray_client_actor_nodes

TUTORIALS = REPO / "docs" / "tutorials"
pytestmark = pytest.mark.slow
# the container tests' fixtures: the engine, and the images built once per machine (under leakbed's build lock)
engine, chosen = containers.engine, containers.chosen


def test_first_run(tmp_path: Path) -> None:
    with Witness() as witness:  # the page's commands each finish: nothing of them stays
        out = run(TUTORIALS / "first-run.md", tmp_path, env=witness.env({}))
        witness.check(tmp_path / "runs")  # no SuperLink, Ray head or agent, lane; no temporary folder, no socket
    assert out[0].startswith("name = ") or "seed" in out[0], out[0]
    report = (tmp_path / "runs" / "first" / "report.md").read_text()
    assert report.splitlines()[2].startswith("Attack side: sandboxed"), report[:300]
    assert "| MLP |" in out[2] and "| Chance |" in report
    assert out[3].strip() == "['knn', 'mlp', 'svm']"
    metrics = json.loads((tmp_path / "runs" / "first" / "metrics.json").read_text())
    best = max(m["x_chance"] for m in metrics["random"].values())
    assert best > 1.5, metrics["random"]  # even 4 rounds of 12 users give the senders away


def test_attack_plugin(tmp_path: Path, example_plugin: Path) -> None:
    out = run(TUTORIALS / "attack-plugin.md", tmp_path)
    assert "top_k = 1" in out[0], out[0]
    assert "bias-labels" in out[1]
    assert "exit code 2" in out[2] and "top_k" in out[2], out[2]
    suite = json.loads((tmp_path / "runs" / "plugin" / "random" / "metrics.json").read_text())["plugin_scored"]
    assert suite["bias-labels"]["updates"] == 24, suite["bias-labels"]  # 4 rounds of 6 devices: every update scored
    assert "bias-labels (example plugin): the device's main class" in out[1], out[1]
    assert not (tmp_path / "runs" / "refused").exists() or not any((tmp_path / "runs" / "refused").iterdir())


def test_own_data(tmp_path: Path) -> None:
    out = run(TUTORIALS / "own-data.md", tmp_path)
    assert out[0].strip() == "720 rows"
    assert 'source = "table"' in out[1] and 'path = "posts.jsonl"' in out[1], out[1]
    refusal = [line for line in out[1].splitlines() if "broken.jsonl" in line]
    assert len(refusal) == 1 and "exit code 2" in out[1], out[1]
    metrics = json.loads((tmp_path / "runs" / "posts" / "metrics.json").read_text())
    assert metrics["random"]["mlp"]["x_chance"] > 1.5  # people's own words give them away


@pytest.fixture
def ray_folder() -> Iterator[Path]:
    """The tutorial cluster's folder (short: Ray's socket paths must fit 107 bytes); afterwards every process
    with it in its command line is stopped (the page's ``ray stop`` would stop every Ray on the machine)."""
    root = Path(tempfile.mkdtemp(prefix="lkdoc-", dir="/tmp"))
    try:
        yield root
    finally:
        terminate(find_pids(re.escape(str(root))), grace=10)
        time.sleep(1)  # SIGKILLed processes take a moment to go
        left = find_pids(re.escape(str(root)))
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"the tutorial cluster's Ray processes are still running: {sorted(left)}"


def test_ray_cluster(tmp_path: Path, ray_folder: Path) -> None:
    """The page's two-node cluster (issue 14.1): ``leakbed run --ray-address`` joins it, its ClientApp actors run on
    both nodes and every sampled device answers, and leakbed leaves the cluster up (the page's ``ray status``)."""
    gcs, dashboard, client, agent_head, agent_node2 = free_ports(5)
    address = f"127.0.0.1:{gcs}"
    own = {  # ports and folders of its own: other Ray instances may run on this machine
        "/tmp/lkray": str(ray_folder),
        "127.0.0.1:6379": address,
        "--port=6379": f"--port={gcs}",
        "--include-dashboard=false": f"--include-dashboard=false --dashboard-port={dashboard} "
        f"--ray-client-server-port={client} --dashboard-agent-listen-port={agent_head}",
        "--dashboard-agent-listen-port=52366": f"--dashboard-agent-listen-port={agent_node2}",
    }
    placed: dict[str, set[str]] = {}

    def before_the_stop(block: int) -> None:
        if block == 4:  # the cluster is still up: where did the ClientApp actors run?
            placed["nodes"], placed["actors"] = set(ray_alive_nodes(address)), set(ray_client_actor_nodes(address))

    out = run(TUTORIALS / "ray-cluster.md", tmp_path, replace=own, after=before_the_stop)
    assert f'ray_address = "{address}"' in out[1], out[1]
    line = next(line for line in out[1].splitlines() if line.endswith("x chance"))
    scores = dict(re.findall(r"'(\w+)': ([\d.]+)", line))
    assert set(scores) == {"mlp", "svm", "knn"} and max(map(float, scores.values())) > 1.5, out[1]  # beats chance
    metrics = json.loads((tmp_path / "runs" / "cluster" / "random" / "metrics.json").read_text())
    assert metrics["pool"]["tapped"] == metrics["pool"]["analysed"] == 8 * 3, metrics["pool"]
    for r, log in metrics["rounds_log"].items():  # every sampled device answered, on whichever node it ran
        assert log["received"] == log["sampled"] and not log["failed"], (r, log)
    assert len(re.findall(r"node_[0-9a-f]+", out[2])) == 2, out[2]  # ray status: both nodes still up
    assert "exit code 2" in out[3], out[3]
    assert len(placed["nodes"]) == 2 and placed["actors"] == placed["nodes"], placed  # devices ran on both nodes
    # the page's stop command stopped the tutorial's nodes (and, by its pattern, nothing else)
    deadline = time.monotonic() + 30
    while find_pids(re.escape(str(ray_folder))) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [Path(f"/proc/{pid}/cmdline").read_bytes()[:300] for pid in find_pids(re.escape(str(ray_folder)))]
    assert not left, f"pkill left some of the tutorial cluster's processes: {left}"


@pytest.mark.containers
class TestComposeTutorial:
    """A class, so xdist runs it as a unit of its own (tests/schedule.py), beside the other tutorials. It uses the
    images the container tests build (their ``chosen`` fixture: one build per machine, under leakbed's build lock)
    and a project name and ports of its own."""

    def test_compose(self, engine: Engine, chosen: images.Images, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        link, prom, graf = free_ports(3)
        monkeypatch.setattr(stack, "WORK", tmp_path / ".leakbed" / "compose")  # where the page's commands (run here) write
        the_stack = stack.Stack("leakbed-tut", 3, 2, False, superlink_port=link, prometheus_port=prom, grafana_port=graf)
        stack.down(engine, the_stack)
        own = {
            "--supernodes 3 --workers 2": f"--supernodes 3 --workers 2 --no-build --project {the_stack.project} "
            f"--ports {link},{prom},{graf}",
            "$PWD/.leakbed/compose/leakbed/flwr": str(the_stack.flwr_home),
            "data.synthetic.users=3 ": f"data.synthetic.users=3 {' '.join(SMALL_COMPOSE)} ",
            "docker compose -p leakbed": shlex.join(
                [*(f"{k}={v}" for k, v in engine.env.items() if k == "DOCKER_HOST"), *engine.compose, *the_stack.compose_args()]
            ),
            "http://127.0.0.1:9090": f"http://127.0.0.1:{prom}",
            "leakbed compose down": f"leakbed compose down --project {the_stack.project}",
        }
        empty: list[str] = []

        def after(block: int) -> None:
            if block == 2:  # the run has ended; its /metrics was up until hold_seconds before
                empty.extend(unfed_panels(the_stack, time.time() - 7))

        with Witness() as witness:  # what the page's commands start, up to `compose down`
            try:
                out = run(TUTORIALS / "compose.md", tmp_path, replace=own, after=after, env=witness.env({}))
            finally:
                left = stack.down(engine, the_stack)
            # once `compose down` has finished, nothing of them is left: no container's conmon, no compose binary, no
            # temporary folder; only Podman's API service when a command here started it, which ends itself when idle
            witness.check(expected=podman_services())
        assert left == [], left
        assert "running: attack-worker-0, attack-worker-1, clientapp-0" in out[0], out[0]
        assert f"prometheus: http://127.0.0.1:{prom}" in out[0], out[0]
        assert "Successfully started run" in out[1], out[1][-3000:]
        metrics = json.loads((tmp_path / "runs" / "compose" / "random" / "metrics.json").read_text())
        assert metrics["users"] == 3 and metrics["rounds"] == 3 and metrics["attack_side"]["remote_workers"] is True
        assert metrics["pool"]["tapped"] == metrics["pool"]["analysed"] == 9, metrics["pool"]
        assert "| Chance |" in out[2], out[2]
        attacks = re.findall(r"'attack': '(\w+)'", out[3])
        assert sorted(attacks) == ["knn", "matching", "mlp", "svm"] or {"mlp", "svm", "knn"} <= set(attacks), out[3]
        assert "'3'" in out[3].splitlines()[-1], out[3]  # the last round Prometheus saw
        assert empty == [], "dashboard panels without data:\n" + "\n".join(empty)
        assert "removed project leakbed-tut" in out[4], out[4]


def podman_services() -> list[int]:
    """The Podman API services leakbed started on its socket, each with its idle limit (``engine.PODMAN_IDLE_S``)."""
    argv = ["system", "service", f"--time={engines.PODMAN_IDLE_S}", f"unix://{engines.podman_socket()}"]
    return sorted(find_pids(re.escape(" ".join(argv))))


# What the compose tutorial's run changes from the page's: 3 rounds, every device every round (a flwr run runs one
# prior, the first: random). Inside the page's double-quoted --run-config, so no double quote.
SMALL_COMPOSE = [
    "data.synthetic.examples_per_user=60",
    "fl.rounds=3",
    "fl.fraction_train=1.0",
    "attack.params.mlp.epochs=60",
]
# Panels a quickstart run cannot feed: its suite has no property, membership, reconstruction or metadata attack, and
# it runs no privacy audit (tests/deploy/test_containers.py's faults run feeds them all).
NOT_FED = ("leakbed_attack_auc", "leakbed_attack_sample_accuracy", "leakbed_attack_count_accuracy", "metadata",
           "leakbed_privacy_epsilon", "leakbed_privacy_flagged")  # fmt: skip


def unfed_panels(the_stack: stack.Stack, at: float) -> list[str]:
    """Every dashboard query a quickstart run feeds that returns no series from the stack's Prometheus at ``at``."""
    doc = dashboard()
    variables = [v["name"] for v in doc["templating"]["list"]]
    empty = []
    for panel in panels(doc):
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables).replace("$__rate_interval", "1m")
            if not any(name in expr for name in NOT_FED) and not containers.prometheus_query(the_stack, expr, at):
                empty.append(f"{panel['title']}: {expr}")
    return empty


def test_defense_plugin(tmp_path: Path, example_plugin: Path) -> None:
    out = run(TUTORIALS / "defense-plugin.md", tmp_path)
    assert '{ name = "hide-bias", fraction = 1.0, users = [], suffix = ".bias" }' in out[0], out[0]
    assert "exit code 2" in out[1] and "(hide-bias).suffix" in out[1], out[1]
    runs = tmp_path / "runs"
    opened, hidden = (json.loads((runs / n / "random" / "metrics.json").read_text()) for n in ("open", "hidden"))
    assert opened["defending_users"] == 0 and hidden["defending_users"] == 12, hidden["defending_users"]
    before, after = opened["plugin_scored"]["bias-labels"], hidden["plugin_scored"]["bias-labels"]
    assert before["x_chance"] > 1.5, before  # the bias gives the main class away ...
    assert after["accuracy"] <= after["chance"] + 1e-9, after  # ... and once hidden, the attack guesses no better than chance
    notes = [line for line in out[2].splitlines() if "bias-labels (example plugin)" in line]
    assert len(notes) == 2, out[2]
