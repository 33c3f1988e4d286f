"""``leakbed run --ray-address`` joins a real two-node Ray cluster (issue 14.1).

Two ``ray start --block`` processes on this machine form the cluster: a head with 1 CPU and a
second node with 1 CPU and a custom ``node2`` resource, each with its own temp dir and ports
(other Ray instances may run here). One CPU per client actor means Flower's pool holds one
actor per node, so a run whose ClientApp actors all lived on one node would show it. Ray's GCS
keeps its actor table after the actors end; the test reads it after the run (the state API
``ray.util.state.list_actors`` needs the dashboard, which this install lacks). At the end both
``ray start`` processes and every process below them are stopped, and the test checks that
nothing with the cluster's temp dir in its command line is left.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.procs import (
    RAY_START_SECONDS,
    Procs,
    find_pids,
    ray_alive_nodes,
    ray_client_actor_nodes,
    ray_head,
    ray_start,
    wait_until,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def two_node_cluster(tmp_path: Path):
    """A head and a second node on 127.0.0.1; yields the head's GCS address and both node ids."""
    root = Path(tempfile.mkdtemp(prefix="lkray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    procs = Procs(tmp_path / "logs")
    try:
        address = ray_head(procs, root / "head", 1)
        node2 = [f"--address={address}", "--node-ip-address=127.0.0.1", '--resources={"node2": 1}']
        ray_start(procs, "ray-node2", root / "node2", 1, *node2)
        nodes: dict[str, dict] = {}

        def both_up() -> bool:
            nodes.update(ray_alive_nodes(address))
            return len(nodes) == 2

        wait_until(both_up, RAY_START_SECONDS, "the second Ray node to join", procs, interval=2.0)
        yield address, nodes
    finally:
        procs.stop_all()
        left = find_pids(str(root))
        try:
            assert not left, f"Ray processes of the test cluster still running: {sorted(left)}"
        finally:
            shutil.rmtree(root, ignore_errors=True)


def test_run_joins_a_two_node_cluster_and_places_actors_on_both(two_node_cluster: tuple[str, dict], tmp_path: Path) -> None:
    import json

    from leakbed.cli import main
    from leakbed.cluster import ray_head_problem

    address, nodes = two_node_cluster
    second = [n for n, res in nodes.items() if "node2" in res]
    assert len(second) == 1, nodes
    sets = [
        "data.synthetic.users=6",
        "data.synthetic.examples_per_user=40",
        "data.synthetic.image_size=8",
        "fl.rounds=2",
        "fl.fraction_train=1.0",  # 6 devices a round: both actors get work
        "workers.count=1",
        "attack.params.mlp.epochs=50",
        'split.priors=["random"]',
    ]
    out = tmp_path / "run"
    t0 = time.monotonic()
    code = main(["run", *(a for s in sets for a in ("--set", s)), "--ray-address", address, "--out", str(out)])
    assert code == 0
    ran = time.monotonic() - t0

    frozen = (out / "config.toml").read_text()
    assert f'ray_address = "{address}"' in frozen
    metrics = json.loads((out / "random" / "metrics.json").read_text())
    assert sorted(metrics["rounds_log"]) == ["1", "2"]
    for r, log in metrics["rounds_log"].items():
        assert log["received"] == log["sampled"] == 6 and not log["failed"], (r, log)
    assert metrics["pool"]["tapped"] == metrics["pool"]["analysed"] == 12

    hosts = ray_client_actor_nodes(address)
    print(f"run took {ran:.0f} s; ClientAppActor nodes: {sorted(hosts)}; cluster nodes: {sorted(nodes)}")
    assert set(hosts) == set(nodes), (hosts, nodes)  # actors on both nodes, and on no private Ray's node
    # leakbed left the user's cluster running: its head answers and both nodes are still alive
    assert ray_head_problem(address) is None
    assert set(ray_alive_nodes(address)) == set(nodes)
