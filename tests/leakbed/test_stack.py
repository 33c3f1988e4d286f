"""`leakbed compose up`'s rendering and engine set-up, checked without an engine (tests/deploy/test_containers.py runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from leakbed import engine, images, stack
from tests.deploy.tools import compose_binary


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(stack, "WORK", tmp_path)
    return tmp_path


def _render(chosen: images.Images, tls: bool, supernodes: int = 4, workers: int = 3) -> tuple[stack.Stack, dict]:
    s = stack.Stack("proj", supernodes, workers, tls, superlink_port=19093)
    files = stack.render(s, chosen)
    doc = yaml.safe_load(files[0].read_text())
    return s, doc


def test_local_images_replace_every_registry_image(work: Path) -> None:
    s, doc = _render(images.LOCAL, tls=False)
    services = doc["services"]
    assert "grafana" not in services and "grafana-data" not in doc["volumes"]  # no image without a registry
    for name, svc in services.items():
        assert "build" not in svc, name  # built by leakbed compose build, never by compose
        assert svc["image"].startswith("localhost/leakbed-"), (name, svc["image"])
    assert services["superlink"]["entrypoint"] == ["flower-superlink"]
    assert services["supernode-3"]["entrypoint"] == ["flower-supernode"]
    assert services["clientapp-3"]["image"] == images.APP_IMAGE and services["attack-worker-2"]["image"] == images.APP_IMAGE
    prom_conf = yaml.safe_load((s.folder / "prometheus.yml").read_text())
    assert [j["job_name"] for j in prom_conf["scrape_configs"]] == ["leakbed-server", "prometheus"]
    assert f"{s.folder / 'prometheus.yml'}:/etc/prometheus/prometheus.yml:ro" in services["prometheus"]["volumes"]


def test_official_images_keep_grafana(work: Path) -> None:
    _, doc = _render(images.OFFICIAL, tls=False)
    assert doc["services"]["grafana"]["image"] == images.OFFICIAL.grafana
    assert doc["services"]["superlink"]["image"] == images.OFFICIAL.superlink


def test_the_rendered_files_are_valid_compose(work: Path) -> None:
    for tls in (False, True):
        s, _ = _render(images.LOCAL, tls=tls)
        files = [a for f in s.files for a in ("-f", str(f))]
        out = subprocess.run(
            [compose_binary(), "-p", s.project, "--project-directory", str(stack.DEPLOY), *files, "config", "-q"],
            capture_output=True,
            text=True,
            env={**os.environ, **s.env()},
            check=False,
        )
        assert out.returncode == 0, out.stderr


def test_tls_secrets_point_at_the_stacks_own_certificates(work: Path) -> None:
    s, _ = _render(images.LOCAL, tls=True)
    tls = yaml.safe_load((s.folder / "compose.tls.yml").read_text())
    assert all(Path(v["file"]).parent == s.certs for v in tls["secrets"].values())
    assert tls["services"]["register-supernodes"]["image"] == images.APP_IMAGE
    assert f"{s.certs}:/certs:ro" in tls["services"]["register-supernodes"]["volumes"]
    conn = stack.write_connection(s).read_text()
    assert (
        'address = "127.0.0.1:19093"' in conn and f'root-certificates = "{s.certs / "ca.crt"}"' in conn and "insecure" not in conn
    )


def test_podman_settings_never_override_the_users_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if str(p) == "/etc/containers/containers.conf" else exists(p))
    own = engine.podman_conf_env()["CONTAINERS_CONF"]
    assert own == str(engine.podman_conf()) and f'seccomp_profile = "{engine.SECCOMP_PROFILE}"' in Path(own).read_text()
    (tmp_path / ".config/containers").mkdir(parents=True)
    (tmp_path / ".config/containers/containers.conf").write_text("[engine]\n")
    assert engine.podman_conf_env() == {}
    monkeypatch.setenv("CONTAINERS_CONF", "/somewhere.conf")
    assert engine.podman_conf_env() == {}


def test_a_dead_socket_does_not_answer(tmp_path: Path) -> None:
    assert not engine.api_answers(tmp_path / "nothing.sock")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", "--base", "nope"], "--base must be auto, official or local, got 'nope'"),
        (["up", "--engine", "lxc"], "--engine must be auto, docker or podman, got 'lxc'"),
        (["down", "--supernodes", "0"], "--supernodes must be 1..1000, got 0"),
        (["build", "--workers", "65"], "--workers must be 1..64, got 65"),
        (["up", "--ports", "9093,9090"], "--ports: '9093,9090' is not three port numbers (SUPERLINK,PROMETHEUS,GRAFANA)"),
        (["up", "--ports", "9093,0,3000"], "--ports: '9093,0,3000' is not three port numbers (SUPERLINK,PROMETHEUS,GRAFANA)"),
        (["start"], "ACTION must be render, build, up or down, got 'start'"),
    ],
)
def test_bad_stack_options_are_one_line_errors(args: list[str], message: str) -> None:
    out = subprocess.run([sys.executable, "-m", "leakbed.cli", "compose", *args], capture_output=True, text=True, check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"leakbed: error: {message}"]


def test_ports_name_the_stacks_published_ports() -> None:
    from leakbed.commands.compose import Ports

    s = stack.Stack("p", 3, 2, False, **Ports().convert("19093,19090,13000", None, None))
    assert s.env() == {"LEAKBED_SUPERLINK_PORT": "19093", "LEAKBED_PROMETHEUS_PORT": "19090", "LEAKBED_GRAFANA_PORT": "13000"}
