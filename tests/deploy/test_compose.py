"""leakbed/deploy/docker-compose.yml and its overlays: rendered for N SuperNodes, valid for the compose binary and the
compose spec."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from leakbed import compose
from leakbed.cli import main as cli_main
from tests.deploy.tools import DEPLOY, check_jsonschema, compose_binary, run

OVERLAYS = {
    "base": [],
    "tls": ["compose.tls.yml"],
    "gpu": ["compose.gpu.yml"],
    "tls+gpu": ["compose.tls.yml", "compose.gpu.yml"],
}


def _files(root: Path, overlays: list[str]) -> list[str]:
    args = ["-f", str(root / "docker-compose.yml")]
    for o in overlays:
        args += ["-f", str(root / o)]
    return args


def _resolved(root: Path, overlays: list[str]) -> dict:
    """The merged model as the compose binary resolves it (``config --format json``)."""
    out = run([compose_binary(), *_files(root, overlays), "config", "--format", "json"], cwd=root)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)




def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_committed_files_are_the_default_rendering() -> None:
    for rel, text in compose.render_all().items():
        assert (DEPLOY / rel).read_text() == text, f"leakbed/deploy/{rel} differs from `leakbed compose --write`: re-render it"


def test_rendering_has_one_supernode_and_clientapp_per_user() -> None:
    doc = yaml.safe_load(compose.render("base", supernodes=5, workers=3))
    services = doc["services"]
    nodes = sorted(s for s in services if s.startswith("supernode-"))
    assert nodes == [f"supernode-{i}" for i in range(5)]
    ports = set()
    for i in range(5):
        node = services[f"supernode-{i}"]["command"]
        assert _flag(node, "--node-config") == f"partition-id={i} num-partitions=5"
        assert _flag(node, "--isolation") == "process"
        port = _flag(node, "--port")
        ports.add(port)
        app = services[f"clientapp-{i}"]
        assert _flag(app["command"], "--runtime-api-address") == f"supernode-{i}:{port}"
        assert app["depends_on"] == [f"supernode-{i}"]
    assert len(ports) == 5
    workers = sorted(s for s in services if s.startswith("attack-worker-"))
    assert workers == ["attack-worker-0", "attack-worker-1", "attack-worker-2"]
    assert services["serverapp"]["depends_on"] == ["superlink", *workers]
    assert compose.worker_addresses(3) == [f"unix:{compose.WORKER_SOCKETS}/{i}/worker.sock" for i in range(3)]
    for w in workers:
        assert _flag(services[w]["command"], "--socket") == "/run/leakbed/worker.sock"


def test_attack_workers_are_hardened_without_a_network_and_share_their_socket_with_the_serverapp_only() -> None:
    """Non-root, no capabilities, no-new-privileges, the gateway's seccomp profile (the deny-list but for what
    bubblewrap needs to build each lane's sandbox), /proc left unmasked for the lanes' own /proc, a read-only root with
    a tmpfs /tmp, a process limit, the attack stores only and read-only, and no network: a socket volume of its own,
    which only the ServerApp mounts besides it; every lane in a sandbox of its own (--sandbox on)."""
    doc = yaml.safe_load(compose.render("base", supernodes=2, workers=2))
    services = doc["services"]
    for i, w in enumerate(("attack-worker-0", "attack-worker-1")):
        svc = services[w]
        assert svc["user"] == "49999:49999" and svc["cap_drop"] == ["ALL"] and svc["network_mode"] == "none"
        opts = ["no-new-privileges:true", "seccomp=./seccomp/attack-worker.json", "systempaths=unconfined"]
        assert svc["security_opt"] == opts
        assert svc["read_only"] is True and svc["tmpfs"] == ["/tmp:size=1g,mode=1777"] and svc["pids_limit"] == 1024
        assert svc["volumes"] == ["leakbed-store:/attack-store:ro", f"{w}-socket:/run/leakbed"]
        assert not {"ports", "expose", "networks"} & set(svc)
        assert _flag(svc["command"], "--sandbox") == "on"  # one bubblewrap sandbox per lane, inside the container
        socket_volume = {"type": "tmpfs", "device": "tmpfs", "o": "uid=49999,gid=49999,mode=0700"}
        assert doc["volumes"][f"{w}-socket"]["driver_opts"] == socket_volume
        mounting = sorted(n for n, s in services.items() if any(v.startswith(f"{w}-socket:") for v in s.get("volumes", [])))
        assert mounting == [w, "serverapp"] and f"{w}-socket:{compose.WORKER_SOCKETS}/{i}" in services["serverapp"]["volumes"]
    profile = json.loads((DEPLOY / "seccomp/attack-worker.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = set(profile["syscalls"][0]["names"])
    assert {"ptrace", "bpf", "keyctl", "init_module", "io_uring_setup"} <= denied  # still refused to the gateway
    assert not {"mount", "unshare", "pivot_root"} & denied  # what bubblewrap needs to build a sandbox


def test_overlays_cover_every_device() -> None:
    tls = yaml.safe_load(compose.render("tls", supernodes=4, workers=2))
    for i in range(4):
        node = tls["services"][f"supernode-{i}"]
        assert "--insecure" not in node["command"]
        assert _flag(node["command"], "--node-config") == f"partition-id={i} num-partitions=4"
        assert {"source": f"node-{i}-key", "target": "node.key"} in node["secrets"]
        assert tls["secrets"][f"node-{i}-key"]["file"] == f"./certs/node-{i}"
    assert tls["services"]["register-supernodes"]["environment"]["LEAKBED_SUPERNODES"] == "4"
    base = yaml.safe_load(compose.render("base", supernodes=4, workers=2))["services"]
    assert not any(w.startswith("attack-worker-") for w in tls["services"])  # no network: nothing to encrypt
    assert set(base["attack-worker-0"]) >= {"network_mode", "security_opt"}
    gpu = yaml.safe_load(compose.render("gpu", supernodes=4, workers=1))
    assert sorted(gpu["services"]) == [f"clientapp-{i}" for i in range(4)]


@pytest.mark.parametrize("supernodes,workers", [(0, 1), (compose.MAX_SUPERNODES + 1, 1), (2, 0), (2, compose.MAX_WORKERS + 1)])
def test_bad_counts_are_refused(supernodes: int, workers: int) -> None:
    with pytest.raises(compose.ComposeError):
        compose.render("base", supernodes, workers)


def test_cli_renders_and_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["compose", "--supernodes", "2", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["services"]["supernode-1"]
    assert "--run-config" in err and "data.synthetic.users=2" in err
    # the printed hint is one shell word list: the run config survives the shell's quoting
    hint = shlex.split(err.splitlines()[-1].split("start a run: ", 1)[1])
    assert 'workers.addresses=["unix:/run/attack-workers/0/worker.sock"]' in hint[hint.index("--run-config") + 1]
    assert cli_main(["compose", "--file", "tls", "--supernodes", "2", "--workers", "1"]) == 0
    hint = shlex.split(capsys.readouterr().err.splitlines()[-1].split("start a run: ", 1)[1])
    assert 'workers.addresses=["unix:/run/attack-workers/0/worker.sock"]' in hint[hint.index("--run-config") + 1]
    assert cli_main(["compose", "--supernodes", "0"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["leakbed: error: --supernodes must be 1..1000, got 0"]
    assert cli_main(["compose", "--file", "nope"]) == 2


@pytest.mark.parametrize("combo", list(OVERLAYS))
def test_compose_config_accepts_every_combination(combo: str) -> None:
    out = run([compose_binary(), *_files(DEPLOY, OVERLAYS[combo]), "config", "-q"])
    assert out.returncode == 0, f"docker-compose config -q ({combo}): {out.stderr}"


def test_merged_models_are_what_each_overlay_promises() -> None:
    n = compose.DEFAULT_SUPERNODES
    base = _resolved(DEPLOY, [])
    assert all("--insecure" in base["services"][f"supernode-{i}"]["command"] for i in range(n))
    both = _resolved(DEPLOY, OVERLAYS["tls+gpu"])["services"]
    link = both["superlink"]["command"]
    assert "--insecure" not in link and "--enable-supernode-auth" in link and "--ssl-certfile" in link
    for i in range(n):
        node = both[f"supernode-{i}"]
        assert "--insecure" not in node["command"] and "--auth-supernode-private-key" in node["command"]
        assert node["depends_on"]["register-supernodes"]["condition"] == "service_completed_successfully"
        app = both[f"clientapp-{i}"]
        assert app["image"].startswith("localhost/leakbed-app-cuda:") and "build" not in app
        devices = app["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "--root-certificates" in both["serverapp"]["command"]
    assert {s["target"] for s in both["serverapp"]["secrets"]} == {"ca.crt"}
    for w in range(compose.DEFAULT_WORKERS):
        worker = both[f"attack-worker-{w}"]
        assert _flag(worker["command"], "--store") == "/attack-store" and worker["network_mode"] == "none"
        assert worker["read_only"] is True and worker["cap_drop"] == ["ALL"] and "secrets" not in worker


def test_a_fresh_rendering_for_other_counts_validates(tmp_path: Path) -> None:
    for rel in ("docker", "grafana", "tls"):
        (tmp_path / rel).symlink_to(DEPLOY / rel)
    compose.write_all(supernodes=7, workers=4, root=tmp_path)
    services = _resolved(tmp_path, OVERLAYS["tls+gpu"])["services"]
    assert sum(s.startswith("supernode-") for s in services) == 7
    assert sum(s.startswith("attack-worker-") for s in services) == 4


def test_compose_config_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validator can fail: a port that is not a port, an unknown key."""
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  x:\n    image: busybox\n    ports: [not-a-port]\n    no_such_key: 1\n")
    assert run([compose_binary(), "-f", str(bad), "config", "-q"], cwd=tmp_path).returncode != 0
    assert run([check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(bad)]).returncode != 0


def test_compose_files_match_the_compose_spec_schema() -> None:
    files = [str(DEPLOY / "docker-compose.yml"), *(str(DEPLOY / o) for o in OVERLAYS["tls+gpu"])]
    out = run([check_jsonschema(), "--builtin-schema", "vendor.compose-spec", *files])
    assert out.returncode == 0, out.stdout + out.stderr


def test_printed_run_config_is_a_valid_experiment() -> None:
    """The overrides `leakbed compose` prints reach the ServerApp as `set` and validate as a config."""
    from leakbed.core.config import load_config, split_overrides

    sets = compose.overrides(4, 3)
    assert split_overrides(" ".join(sets)) == sets
    cfg = load_config(None, sets)
    assert cfg.data.synthetic.users == 4
    assert cfg.workers.addresses == compose.worker_addresses(3)
    assert cfg.telemetry.port == compose.SERVER_METRICS_PORT and cfg.telemetry.host == "0.0.0.0"
    assert cfg.telemetry.hold_seconds > 5  # longer than Prometheus' scrape interval: the final values get scraped
    assert not cfg.workers.tls_root_cert  # Unix sockets: no TLS
    assert load_config(None, compose.overrides(4, 3, tls=True)) == cfg
    scrape = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())["global"]["scrape_interval"]
    assert int(scrape.rstrip("s")) < cfg.telemetry.hold_seconds
