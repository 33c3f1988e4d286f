"""Every generated results table agrees with its committed summary: the page holds exactly what
``python -m leakbed.reference.results write`` renders from ``docs/results/data/``, and the summaries hold the
numbers their runs wrote (checked here against the headline numbers quoted in prose)."""

from __future__ import annotations

import json

from leakbed.reference import results


def test_every_generated_table_is_the_summary_rendered() -> None:
    regions = 0
    for page in results.PAGES:
        text = page.read_text(encoding="utf-8")
        regions += len(results.REGION.findall(text))
        assert results.rendered(text) == text, f"{page}: run python -m leakbed.reference.results write"
    assert regions >= 4  # README, the first-run tutorial, closed-world and defenses pages


def test_every_summary_is_used_and_states_its_command() -> None:
    used = {m["name"] for page in results.PAGES for m in results.REGION.finditer(page.read_text(encoding="utf-8"))}
    for path in results.DATA.glob("*.json"):
        summary = json.loads(path.read_text())
        assert "leakbed" in summary["command"], path.name
        assert path.stem in used, f"{path.name} is shown on no page"


def test_the_quickstart_table_is_the_reports() -> None:
    summary = json.loads((results.DATA / "quickstart.json").read_text())
    table = results.run_table(summary)
    assert "| SVM | 44.9 (14×) | 41.7 | 74.2 | 36.8 (12×) | 31.9 | 61.7 |" in table
    assert table.splitlines()[-1] == "| Chance | 3.2 (1×) | 1.7 | 8.3 | 3.2 (1×) | 1.7 | 8.3 |"
    for prior in summary["priors"].values():  # every attacker far above chance: the README's claim
        assert all(m["x_chance"] > 5 for m in prior.values())
