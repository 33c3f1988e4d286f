"""leakbed/deploy/prometheus/prometheus.yml: valid for promtool, scraping exactly the exporters the compose file runs."""

from __future__ import annotations

from pathlib import Path

import yaml

from leakbed import compose
from tests.deploy.tools import DEPLOY, promtool, run

CONFIG = DEPLOY / "prometheus/prometheus.yml"


def test_promtool_accepts_the_config() -> None:
    out = run([promtool(), "check", "config", str(CONFIG)])
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_rejects_a_broken_config(tmp_path: Path) -> None:
    bad = tmp_path / "prometheus.yml"
    bad.write_text("global:\n  scrape_interval: often\nscrape_configs:\n  - job_name: x\n")
    assert run([promtool(), "check", "config", str(bad)]).returncode != 0


def targets(doc: dict, job: str) -> list[str]:
    (cfg,) = [j for j in doc["scrape_configs"] if j["job_name"] == job]
    return [t for group in cfg["static_configs"] for t in group["targets"]]


def test_targets_are_the_compose_exporters() -> None:
    """Prometheus scrapes the ServerApp only: the attack workers are on an internal network it does not join,
    and their task metrics come from the pool's counts."""
    doc = yaml.safe_load(CONFIG.read_text())
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["leakbed-server", "prometheus"]
    assert targets(doc, "leakbed-server") == [f"serverapp:{compose.SERVER_METRICS_PORT}"]
    assert str(compose.SERVER_METRICS_PORT) in services["serverapp"]["expose"]
    assert all("--metrics-port" not in svc.get("command", []) for svc in services.values())


def test_the_rendering_passes_promtool(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(compose.render("prometheus", supernodes=2, workers=5))
    assert run([promtool(), "check", "config", str(path)]).returncode == 0
