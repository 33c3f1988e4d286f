"""The rendered compose topology, run for real without a container engine.

No Docker engine runs here, so this test takes docker-compose.yml as rendered for 2 SuperNodes
and 1 attack worker and starts every Flower and leakbed service of it as a local process: the
same executables (the images' entrypoints), the same arguments, service host names and
container ports mapped to 127.0.0.1 and free ports, ``/data`` to a temp folder. Then it starts a
run with the run config ``leakbed compose`` prints, as a user would, and checks the run's
report, and that the /metrics endpoints Prometheus is configured to scrape serve the catalogue.
It checks every flag the compose file passes (SuperLink and SuperNodes in process isolation,
one SuperExec per SuperNode, the attack worker CLI), not the images themselves.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from leakbed import compose
from tests.integration.procs import (
    OVERRIDES,
    VENV_BIN,
    Procs,
    check_run_dir,
    flower_env,
    free_ports,
    http_ok,
    run_logged,
    wait_until,
    write_connection,
)

SUPERNODES, WORKERS = 2, 1
# what each image runs when the compose service names no entrypoint
IMAGE_ENTRYPOINTS = {
    "flwr/superlink": "flower-superlink",
    "flwr/supernode": "flower-supernode",
    "leakbed-app": "flower-superexec",  # deploy/docker/app.Dockerfile's ENTRYPOINT
}
SERVICES = ["superlink", "attack-worker-0", "serverapp", "supernode-0", "supernode-1", "clientapp-0", "clientapp-1"]


@pytest.fixture
def procs(tmp_path: Path):
    procs = Procs(tmp_path / "logs")
    try:
        yield procs
    finally:
        procs.stop_all()


class Mapping:
    """Service host names -> 127.0.0.1, container ports -> free local ports, /data -> a temp folder."""

    def __init__(self, services: dict, data: Path) -> None:
        self.hosts = set(services)
        container_ports = {"9093", str(compose.WORKER_PORT), str(compose.WORKER_METRICS_PORT), str(compose.SERVER_METRICS_PORT)}
        for name, svc in services.items():
            if name.startswith("supernode-"):
                cmd = svc["command"]
                container_ports.add(cmd[cmd.index("--port") + 1])
        self.ports = dict(zip(sorted(container_ports), map(str, free_ports(len(container_ports))), strict=True))
        self.data = data

    def value(self, text: str) -> str:
        def host_port(m: re.Match[str]) -> str:
            return f"127.0.0.1:{self.ports[m[2]]}" if m[1] in self.hosts else m[0]

        text = re.sub(r"([a-z][a-z0-9-]*):(\d+)", host_port, text)
        return text.replace("0.0.0.0", "127.0.0.1").replace("/data", str(self.data))

    def argv(self, svc: dict) -> list[str]:
        entry = svc.get("entrypoint") or [IMAGE_ENTRYPOINTS[svc["image"].split(":")[0]]]
        out, cmd = [str(VENV_BIN / entry[0]), *entry[1:]], svc["command"]
        for i, arg in enumerate(cmd):
            is_port = i > 0 and cmd[i - 1] in ("--port", "--metrics-port")
            out.append(self.ports[arg] if is_port else self.value(arg))
        return out


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


@pytest.mark.slow
def test_rendered_topology_runs_a_federation(tmp_path: Path, procs: Procs) -> None:
    services = yaml.safe_load(compose.render("base", SUPERNODES, WORKERS))["services"]
    assert sorted(s for s in services if s not in ("prometheus", "grafana")) == sorted(SERVICES)
    data = tmp_path / "data"
    data.mkdir()
    m = Mapping(services, data)
    home = tmp_path / "flwr-home"
    link = f"127.0.0.1:{m.ports['9093']}"
    write_connection(home, "leakbed-compose", f'address = "{link}"\ninsecure = true')
    base_env = flower_env(home)
    server_metrics = f"http://127.0.0.1:{m.ports[str(compose.SERVER_METRICS_PORT)]}/metrics"
    worker_metrics = f"http://127.0.0.1:{m.ports[str(compose.WORKER_METRICS_PORT)]}/metrics"
    for name in SERVICES:
        env = dict(base_env)
        env.update({k: m.value(str(v)) for k, v in services[name].get("environment", {}).items()})
        procs.start(name, m.argv(services[name]), env)
        if name == "superlink":
            wait_until(lambda: http_ok(f"http://{link}/health"), 60, f"SuperLink /health on {link}", procs)
        if name.startswith("attack-worker-"):
            wait_until(lambda: http_ok(worker_metrics), 60, f"{name} /metrics", procs)

    # the run config `leakbed compose` prints, with the tests' small run on top
    overrides = [m.value(o) for o in compose.overrides(SUPERNODES, WORKERS)]
    run = data / "runs" / "compose"
    value = f"set='{OVERRIDES} {' '.join(overrides)}' out-dir='{run}' prior='random'"
    cmd = [str(VENV_BIN / "flwr"), "run", str(Path(__file__).resolve().parents[2]), "leakbed-compose", "--stream"]
    t0 = time.monotonic()
    code, output = run_logged(procs, "flwr-run", [*cmd, "--run-config", value], base_env, 300)
    try:
        assert code == 0 and "Successfully started run" in output, output
        metrics = check_run_dir(run, "random")
        assert metrics["pool"]["tapped"] == 4
        assert (run / "report.md").is_file()
        # The ServerApp holds /metrics open after the run (telemetry.hold_seconds) for a last scrape.
        served = scrape(server_metrics)
        assert re.search(r'^leakbed_round\{prior="random"\} 2\.0$', served, re.M), served
        assert re.search(r'^leakbed_run_finished\{prior="random"\} 1\.0$', served, re.M), served
        assert re.search(r'^leakbed_updates_tapped_total\{prior="random"\} 4\.0$', served, re.M), served
        worker = scrape(worker_metrics)
        assert re.search(r'^leakbed_worker_tasks_total\{kind="\w+",outcome="ok"\} [1-9]', worker, re.M), worker
        assert re.search(r"^leakbed_worker_updates_stored_total 4\.0$", worker, re.M), worker
    except (AssertionError, OSError):
        print(procs.tails(60), file=sys.stderr)
        raise
    print(f"\n[compose topology] flwr run took {time.monotonic() - t0:.1f}s")
