"""SecAgg+ under ``flwr run`` (issue 13.3) in a local deployment (SuperLink + one SuperNode per user): the
pyproject's one ClientApp (``client.app:app``) hands the SecAgg+ stages to the SecAgg+ device, and the ServerApp runs
the legacy workflow; the device's update-level Mods apply on that path too (here: noise on the device's update).

The same app under ``flwr run`` in the Simulation Runtime is what ``leakbed.simulate`` submits (``SimulationLink.submit``
runs ``flwr run`` of the pyproject's app): tests/integration/test_secagg.py checks SecAgg+ there (with the aggregate
equal to the devices' FedAvg mean, more than this module's checks), and test_flwr_run_simulation.py the ``:local:``
connection's managed SuperLink, so a third simulation here added no assertion of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leakbed.core.layout import RunLayout
from tests.integration.procs import (
    VENV_BIN,
    Procs,
    assert_run_completed,
    flower_env,
    free_ports,
    http_ok,
    run_logged,
    wait_until,
    write_connection,
)

REPO = Path(__file__).resolve().parents[2]
SETS = (
    "data.synthetic.users=3 data.synthetic.examples_per_user=40 fl.rounds=2 fl.fraction_train=1.0 fl.round_timeout=240 "
    "fl.secure_aggregation=\"secagg+\" fl.secagg.max_weight=100 data.property_plan.holder_fraction=0.34 "
    'workers.count=1 attack.suite=["aggregate-property"] attack.params.aggregate-property.aux_updates=2 '
    'split.priors=["random"] defenses=[{name="noise",variance=0.0001,users=["user1"]}]'
)


def _flwr_run(procs: Procs, connection: str, run: Path, env: dict[str, str], extra: list[str]) -> str:
    cmd = [str(VENV_BIN / "flwr"), "run", str(REPO), connection, "--stream", *extra]
    cmd += ["--run-config", f"set='{SETS}' out-dir='{run}' prior='random'"]
    code, output = run_logged(procs, f"flwr-run-{connection}", cmd, env, 400)
    assert code == 0 and "Successfully started run" in output, output
    return output


def _check(run: Path) -> dict:
    metrics = json.loads((RunLayout(run).results("random") / "metrics.json").read_text())
    assert metrics["secure_aggregation"] == "secagg+" and metrics["attackers"] == {}, metrics
    assert metrics["attackers_failed"] == {}
    agg = metrics["suite"]["aggregate-property"]
    assert agg["aggregates"] == 2 and agg["participants_mean"] == 3.0, agg
    assert {r: log["received"] for r, log in metrics["rounds_log"].items()} == {"1": 3, "2": 3}
    truth = [json.loads(x) for x in (RunLayout(run).referee("random") / "truth.jsonl").read_text().splitlines()]
    assert [t["user_id"] for t in truth] == ["aggregate:user0 user1 user2"] * 2
    assert (run / "report.md").is_file()
    return metrics


@pytest.mark.slow
def test_secagg_under_flwr_run_in_a_local_deployment(tmp_path: Path, procs: Procs) -> None:
    home, run = tmp_path / "flwr-home", tmp_path / "run"
    link_port, *node_ports = free_ports(4)
    link = f"127.0.0.1:{link_port}"
    write_connection(home, "local-deployment", f'address = "{link}"\ninsecure = true')
    env = flower_env(home)
    superlink = [str(VENV_BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(link_port)]
    procs.start("superlink", [*superlink, "--disable-runtime-dependency-installation", "--database", str(tmp_path / "l.db")], env)
    wait_until(lambda: http_ok(f"http://{link}/health"), 90, "SuperLink /health", procs)
    for pid, port in enumerate(node_ports):
        argv = [str(VENV_BIN / "flower-supernode"), "--insecure", "--superlink", link, "--port", str(port)]
        procs.start(f"supernode{pid}", [*argv, "--node-config", f"partition-id={pid} num-partitions=3"], env)
    _flwr_run(procs, "local-deployment", run, env, [])
    assert_run_completed(procs, "local-deployment", env)
    _check(run)
