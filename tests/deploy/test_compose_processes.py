"""The rendered compose topology, run for real without a container engine.

No Docker engine runs here, so these tests take the compose model as the compose binary merges
it (``docker-compose config``) for 2 SuperNodes and 1 attack worker and start every Flower and
leakbed service of it as a local process: the same executables (the images' entrypoints), the
same arguments, service host names and container ports mapped to 127.0.0.1 and free ports,
the volumes ``/data``, ``/attack-store`` and ``/referee`` to temp folders, ``/run/secrets/<target>``
to the secret's file. Then a run starts
with the run config ``leakbed compose`` prints, as a user would. They check every flag the
compose files pass (SuperLink and SuperNodes in process isolation, one SuperExec per SuperNode,
the attack worker CLI, and with the TLS overlay: certificates, SuperNode registration and
authentication, the attack workers' TLS), the run's report, and the /metrics endpoints Prometheus
scrapes; not the images.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from core.layout import RunLayout
from leakbed import compose
from tests.deploy.tools import REPO, compose_binary, run
from tests.integration.procs import (
    OVERRIDES,
    VENV_BIN,
    Procs,
    check_run_dir,
    flower_env,
    free_ports,
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


def merged_services(root: Path, overlays: list[str]) -> tuple[dict, dict]:
    """(services, top-level secrets) of the files under ``root`` as the compose binary merges them."""
    files = ["-f", str(root / "docker-compose.yml")]
    for o in overlays:
        files += ["-f", str(root / o)]
    out = run([compose_binary(), *files, "config", "--format", "json"], cwd=root)
    assert out.returncode == 0, out.stderr
    model = json.loads(out.stdout)
    return model["services"], model.get("secrets", {})


def rendered_tree(tmp_path: Path) -> Path:
    """A repository-like folder holding a fresh rendering for SUPERNODES and WORKERS."""
    root = tmp_path / "repo"
    for rel in ("deploy/docker", "deploy/grafana", "deploy/tls"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(REPO / rel)
    compose.write_all(SUPERNODES, WORKERS, root=root)
    return root


VOLUMES = ("/data", "/attack-store", "/referee")  # container paths of the compose volumes


class Mapping:
    """Service host names -> 127.0.0.1, container ports -> free local ports, volumes -> temp folders
    (``/data`` -> ``data``, the others -> folders of the same name beside it)."""

    def __init__(self, services: dict, data: Path, secrets: dict) -> None:
        self.hosts = set(services)
        container_ports = {"9093", str(compose.WORKER_PORT), str(compose.WORKER_METRICS_PORT), str(compose.SERVER_METRICS_PORT)}
        for name, svc in services.items():
            if name.startswith("supernode-"):
                cmd = svc["command"]
                container_ports.add(cmd[cmd.index("--port") + 1])
        self.ports = dict(zip(sorted(container_ports), map(str, free_ports(len(container_ports))), strict=True))
        self.data = data
        self.volumes = {v: data if v == "/data" else data.parent / v.lstrip("/") for v in VOLUMES}
        for folder in self.volumes.values():
            if folder != data:
                folder.mkdir(parents=True, exist_ok=True)
        self.secrets = secrets

    def value(self, text: str, svc: dict | None = None) -> str:
        def host_port(m: re.Match[str]) -> str:
            return f"127.0.0.1:{self.ports[m[2]]}" if m[1] in self.hosts else m[0]

        for s in (svc or {}).get("secrets", []):
            text = text.replace(f"/run/secrets/{s['target']}", self.secrets[s["source"]]["file"])
        text = re.sub(r"([a-z][a-z0-9-]*):(\d+)", host_port, text)
        volume = "|".join(map(re.escape, VOLUMES))
        text = re.sub(rf"(?<![\w./-])({volume})(?![\w.-])", lambda v: str(self.volumes[v[1]]), text)
        return text.replace("0.0.0.0", "127.0.0.1")

    def argv(self, svc: dict) -> list[str]:
        entry = svc.get("entrypoint") or [IMAGE_ENTRYPOINTS[svc["image"].split(":")[0]]]
        out, cmd = [str(VENV_BIN / entry[0]), *entry[1:]], svc["command"]
        for i, arg in enumerate(cmd):
            is_port = i > 0 and cmd[i - 1] in ("--port", "--metrics-port")
            out.append(self.ports[arg] if is_port else self.value(arg, svc))
        return out

    def url(self, container_port: int, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.ports[str(container_port)]}{path}"


def get(url: str, ca: str | None = None) -> str:
    context = ssl.create_default_context(cafile=ca) if ca else None
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        return r.read().decode()


def ok(url: str, ca: str | None = None) -> bool:
    try:
        get(url, ca)
        return True
    except OSError:
        return False


class Scraper:
    """Scrape a /metrics URL every 0.5 s in a thread; ``last`` is the latest successful scrape."""

    def __init__(self, url: str) -> None:
        self.url, self.last = url, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.last = get(self.url)
            except OSError:
                continue

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def start(procs: Procs, m: Mapping, services: dict, name: str, env: dict[str, str]) -> None:
    svc = services[name]
    env = dict(env)
    env.update({k: m.value(str(v), svc) for k, v in (svc.get("environment") or {}).items()})
    procs.start(name, m.argv(svc), env)


def run_and_check(procs: Procs, m: Mapping, env: dict[str, str], services: dict, tls: bool = False) -> None:
    """``flwr run`` with the printed run config (plus the tests' small run); check the report and /metrics.
    With ``tls`` the run config names the CA as the serverapp container sees it (its secrets)."""
    overrides = [m.value(o, services["serverapp"]) for o in compose.overrides(SUPERNODES, WORKERS, tls)]
    overrides = [re.sub(r"^(telemetry\.port=)(\d+)$", lambda x: x[1] + m.ports[x[2]], o) for o in overrides]
    out = m.data / "runs" / "compose"
    # the last override wins: a short hold is enough for this test's scraper (0.5 s), not for Prometheus (5 s)
    value = f"set='{OVERRIDES} {' '.join(overrides)} telemetry.hold_seconds=2' out-dir='{out}' prior='random'"
    cmd = [str(VENV_BIN / "flwr"), "run", str(REPO), "leakbed-compose", "--stream", "--run-config", value]
    t0 = time.monotonic()
    with Scraper(m.url(compose.SERVER_METRICS_PORT)) as scraper:  # as Prometheus does, while the run is on
        code, output = run_logged(procs, "flwr-run", cmd, env, 300)
    try:
        assert code == 0 and "Successfully started run" in output, output
        metrics = check_run_dir(out, "random", RunLayout(out, m.volumes["/attack-store"], m.volumes["/referee"]))
        assert metrics["pool"]["tapped"] == 4 and (out / "report.md").is_file()
        # The ServerApp holds /metrics open after the run (telemetry.hold_seconds) for a last scrape.
        served = scraper.last
        assert re.search(r'^leakbed_round\{prior="random"\} 2\.0$', served, re.M), served
        assert re.search(r'^leakbed_run_finished\{prior="random"\} 1\.0$', served, re.M), served
        assert re.search(r'^leakbed_updates_tapped_total\{prior="random"\} 4\.0$', served, re.M), served
        worker = get(m.url(compose.WORKER_METRICS_PORT))
        assert re.search(r'^leakbed_worker_tasks_total\{kind="\w+",outcome="ok"\} [1-9]', worker, re.M), worker
        assert re.search(r"^leakbed_worker_updates_stored_total 4\.0$", worker, re.M), worker
    except (AssertionError, OSError):
        print(procs.tails(60), file=sys.stderr)
        raise
    print(f"\n[compose topology] flwr run took {time.monotonic() - t0:.1f}s")


def start_services(procs: Procs, m: Mapping, services: dict, env: dict[str, str], link_health: str, ca: str | None) -> None:
    for name in SERVICES:
        start(procs, m, services, name, env)
        if name == "superlink":
            wait_until(lambda: ok(link_health, ca), 60, f"SuperLink {link_health}", procs)
            if ca:  # TLS overlay: the one-shot registration runs before any SuperNode starts
                register(procs, m, services, env, ca)
        if name.startswith("attack-worker-"):
            wait_until(lambda: ok(m.url(compose.WORKER_METRICS_PORT)), 60, f"{name} /metrics", procs)


def register(procs: Procs, m: Mapping, services: dict, env: dict[str, str], ca: str) -> None:
    svc = services["register-supernodes"]
    certs = Path(m.secrets["ca-cert"]["file"]).parent
    local = dict(env, LEAKBED_CERTS=str(certs), LEAKBED_CA=ca, LEAKBED_SUPERLINK=m.value("superlink:9093"))
    local["FLWR_HOME"] = str(m.data.parent / "register-home")
    local.update({k: str(v) for k, v in svc["environment"].items()})
    script = svc["entrypoint"][1].replace("/app/", f"{REPO}/")
    # a one-shot: it must finish (exit 0) before the SuperNodes start, so it is not one of ``procs``
    done = subprocess.run([svc["entrypoint"][0], script], env=local, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and f"registered {SUPERNODES} SuperNode keys" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_rendered_topology_runs_a_federation(tmp_path: Path, procs: Procs) -> None:
    services, secrets = merged_services(rendered_tree(tmp_path), [])
    assert sorted(s for s in services if s not in ("prometheus", "grafana")) == sorted(SERVICES)
    m = Mapping(services, tmp_path / "data", secrets)
    m.data.mkdir()
    home = tmp_path / "flwr-home"
    write_connection(home, "leakbed-compose", f'address = "{m.value("superlink:9093")}"\ninsecure = true')
    env = flower_env(home)
    start_services(procs, m, services, env, m.url(9093, "/health"), None)
    run_and_check(procs, m, env, services)


@pytest.mark.slow
def test_tls_overlay_authenticates_supernodes_and_runs(tmp_path: Path, procs: Procs) -> None:
    root = rendered_tree(tmp_path)
    certs = root / "deploy" / "certs"
    made = run(["bash", str(REPO / "deploy/certs.sh"), str(certs), str(SUPERNODES)])
    assert made.returncode == 0, made.stderr
    services, secrets = merged_services(root, ["deploy/compose.tls.yml"])
    assert "--insecure" not in services["superlink"]["command"]
    m = Mapping(services, tmp_path / "data", secrets)
    m.data.mkdir()
    ca = str(certs / "ca.crt")
    home = tmp_path / "flwr-home"
    write_connection(home, "leakbed-compose", f'address = "{m.value("superlink:9093")}"\nroot-certificates = "{ca}"')
    env = flower_env(home)
    worker = services["attack-worker-0"]["command"]
    assert worker[worker.index("--ssl-certfile") + 1] == "/run/secrets/worker.pem" and "--ssl-keyfile" in worker
    start_services(procs, m, services, env, m.url(9093, "/health").replace("http:", "https:"), ca)
    run_and_check(procs, m, env, services, tls=True)
    assert os.stat(certs / "node-0").st_mode & 0o077 == 0  # private keys stay private
