"""deploy/prometheus/prometheus.yml: valid for promtool, scraping exactly the exporters the compose file runs."""

from __future__ import annotations

from pathlib import Path

import yaml

from leakbed import compose
from tests.deploy.tools import REPO, promtool, run

CONFIG = REPO / "deploy/prometheus/prometheus.yml"


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
    doc = yaml.safe_load(CONFIG.read_text())
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    workers = sorted(s for s in services if s.startswith("attack-worker-"))
    assert len(workers) == compose.DEFAULT_WORKERS
    expected = []
    for w in workers:
        cmd = services[w]["command"]
        port = cmd[cmd.index("--metrics-port") + 1]
        assert port in services[w]["expose"]
        expected.append(f"{w}:{port}")
    assert targets(doc, "leakbed-workers") == expected
    assert targets(doc, "leakbed-server") == [f"serverapp:{compose.SERVER_METRICS_PORT}"]
    assert str(compose.SERVER_METRICS_PORT) in services["serverapp"]["expose"]


def test_rendering_for_more_workers_scrapes_each(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(compose.render("prometheus", supernodes=2, workers=5))
    assert len(targets(yaml.safe_load(path.read_text()), "leakbed-workers")) == 5
    assert run([promtool(), "check", "config", str(path)]).returncode == 0
