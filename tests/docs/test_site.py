"""The docs site builds strict (a warning or a broken link fails), and its reference pages are the code's own:
every config option, CLI command, Prometheus metric and published plugin appears, with what defines it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"


def _docs_tree() -> dict[str, tuple[int, int]]:
    """Every file under docs/ with its modification time and size."""
    return {str(p.relative_to(DOCS)): (p.stat().st_mtime_ns, p.stat().st_size) for p in DOCS.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """The site built into a folder of its own, with the docs/ tree before and after the build."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out), "-f", str(REPO / "mkdocs.yml")]
    before = _docs_tree()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, before, _docs_tree()


@pytest.fixture(scope="module")
def site(built: tuple[Path, dict, dict]) -> Path:
    return built[0]


def _page(name: str) -> str:
    """A generated reference page's markdown, as the build's hook adds it to the site."""
    from leakbed.reference.pages import PAGES

    return PAGES[name]()


def test_the_build_leaves_the_checkouts_docs_folder_alone(built: tuple[Path, dict, dict]) -> None:
    site, before, after = built
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, f"the docs build wrote into docs/: {changed}"  # the reference pages exist in the site only
    assert (site / "reference" / "catalog" / "index.html").is_file()


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


def test_the_generated_pages_point_only_at_pages_that_exist(site: Path) -> None:
    import re

    from leakbed.reference.pages import PAGES

    for name in PAGES:
        text = _page(name)
        assert "README's" not in text, f"{name} names a README section instead of linking a page"
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" not in target:  # another generated page, or a page of docs/
                assert target in PAGES or (DOCS / "reference" / target).resolve().is_file(), f"{name} links {target}"
    catalog = (site / "reference" / "catalog" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../tutorials/attack-plugin/"' in catalog and 'href="../../tutorials/defense-plugin/"' in catalog
