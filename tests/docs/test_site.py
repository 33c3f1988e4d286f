"""The docs site builds strict (a warning or a broken link fails), and its reference pages are the code's own:
every config option, CLI command, Prometheus metric and published plugin appears, with what defines it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out), "-f", str(REPO / "mkdocs.yml")]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _page(name: str) -> str:
    return (REPO / "docs" / "reference" / name).read_text(encoding="utf-8")


def test_the_site_builds_with_every_reference_page(site: Path) -> None:
    for name in ("config", "cli", "metrics", "catalog"):
        assert (site / "reference" / name / "index.html").stat().st_size > 2000, name


def test_every_config_option_is_in_the_reference_with_its_unit_and_bound(site: Path) -> None:
    from core.config import ExperimentConfig
    from leakbed.reference.fields import rows

    page = _page("config.md")
    found = rows(ExperimentConfig)
    assert len(found) > 60
    for row in found:
        assert f"| `{row.key}` |" in page, row.key
        assert row.unit, f"{row.key} states no unit"
    assert "| `fl.rounds` | `int` | `" in page and "≥ 1" in page.split("| `fl.rounds` |")[1].splitlines()[0]


def test_every_metric_and_plugin_is_in_the_reference(site: Path) -> None:
    from attacks import registry as attacks
    from core.telemetry import metric_names
    from defenses import registry as defenses

    metrics = _page("metrics.md")
    for name in metric_names():
        base = name.removesuffix("_total")
        assert f"`{name}`" in metrics or f"`{base}`" in metrics, name
    catalog = _page("catalog.md")
    for name in attacks.names():
        section = catalog.split(f"### `{name}`", 1)[1].split("### ", 1)[0]
        assert "(none declared)" not in section, f"attack {name} declares no source or threat model"
    for name in defenses.names():
        assert f"### `{name}`" in catalog, name
    commands = _page("cli.md")
    for command in ("run", "validate", "sweep", "sandbox-run", "deploy-local", "compose", "attack-worker"):
        assert f"## `leakbed {command}`" in commands, command
