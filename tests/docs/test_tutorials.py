"""Every tutorial runs: its ``<!-- run -->`` blocks are executed as written (at the small scale the page states),
and what the page says they show is checked against what they printed and wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs.tutorials import run

TUTORIALS = REPO / "docs" / "tutorials"
pytestmark = pytest.mark.slow


def test_first_run(tmp_path: Path) -> None:
    out = run(TUTORIALS / "first-run.md", tmp_path)
    assert out[0].startswith("name = ") or "seed" in out[0], out[0]
    report = (tmp_path / "runs" / "first" / "report.md").read_text()
    assert report.splitlines()[2].startswith("Attack side: sandboxed"), report[:300]
    assert "| MLP |" in out[2] and "| Chance |" in report
    assert out[3].strip() == "['knn', 'mlp', 'svm']"
    metrics = json.loads((tmp_path / "runs" / "first" / "metrics.json").read_text())
    best = max(m["x_chance"] for m in metrics["random"].values())
    assert best > 1.5, metrics["random"]  # even 4 rounds of 12 users give the senders away


def test_attack_plugin(tmp_path: Path, example_plugin: Path) -> None:
    out = run(TUTORIALS / "attack-plugin.md", tmp_path)
    assert "top_k = 1" in out[0], out[0]
    assert "bias-labels" in out[1]
    assert "exit code 2" in out[2] and "top_k" in out[2], out[2]
    suite = json.loads((tmp_path / "runs" / "plugin" / "random" / "metrics.json").read_text())["suite"]
    assert suite["bias-labels"]["updates"] == 24, suite["bias-labels"]  # 4 rounds of 6 devices: every update scored
    assert "bias-labels (example plugin): the device's main class" in out[1], out[1]
    assert not (tmp_path / "runs" / "refused").exists() or not any((tmp_path / "runs" / "refused").iterdir())


def test_own_data(tmp_path: Path) -> None:
    out = run(TUTORIALS / "own-data.md", tmp_path)
    assert out[0].strip() == "720 rows"
    assert 'source = "table"' in out[1] and 'path = "posts.jsonl"' in out[1], out[1]
    refusal = [line for line in out[1].splitlines() if "broken.jsonl" in line]
    assert len(refusal) == 1 and "exit code 2" in out[1], out[1]
    metrics = json.loads((tmp_path / "runs" / "posts" / "metrics.json").read_text())
    assert metrics["random"]["mlp"]["x_chance"] > 1.5  # people's own words give them away
