"""The privacy audit's results page says what its committed runs hold: the flag on exactly the broken mechanisms,
the honest runs' intervals around the exact ε, the coverage over seeds, what one run's bound can show."""

from __future__ import annotations

import json

from leakbed.reference import results
from leakbed.reference.audit_results import audit_table, coverage_table

PAGE = results.ROOT / "docs" / "results" / "privacy-audit.md"


def _rows(name: str) -> list[dict]:
    return json.loads((results.DATA / f"{name}.json").read_text())["rows"]


def test_the_flag_is_on_exactly_the_broken_mechanisms():
    rows = {r["label"]: r for r in _rows("sweep-audit-broken")}
    delivered = {label: r["delivered"] or {} for label, r in rows.items()}
    broken = {label for label, d in delivered.items() if d.get("noise_scale", 1) != 1 or d.get("clip_scale", 1) != 1}
    assert broken == {"broken-noise.noise_scale=0.5", "broken-noise.noise_scale=0.1", "broken-clip.clip_scale=10.0"}
    assert {label for label, r in rows.items() if r["flagged"]} == broken
    honest = rows["honest.noise_multiplier=1.0"]
    assert honest["epsilon"] == rows["broken-noise.noise_scale=0.1"]["epsilon"]  # the same claim, broken or not
    lo, hi = honest["views"]["all iterates"]["interval"]
    assert lo < honest["epsilon_exact"] < hi
    table = audit_table([{"rows": list(rows.values())}])
    assert table.count("**leaks more than claimed**") == 3
    page = PAGE.read_text(encoding="utf-8")
    assert "<!-- generated: sweep-audit-broken -->" in page and table in page


def test_honest_runs_across_noise_multipliers_hold_the_exact_epsilon_and_are_not_flagged():
    for r in _rows("sweep-audit"):
        assert not r["flagged"]
        if r["epsilon"] is not None and r["defense"] == "dp-fedavg" and r["views"]:
            lo, hi = r["views"]["all iterates"]["interval"]
            assert lo < r["epsilon_exact"] < hi < 1.5 * r["epsilon"], r["label"]
            assert r["epsilon_exact"] < r["epsilon"]  # the accountant is the loose one
            assert r["views"]["all iterates"]["epsilon_lower_bound"] <= r["views"]["all iterates"]["lower_bound_ceiling"]


def test_the_coverage_and_the_ceiling_tables():
    summary = json.loads((results.DATA / "audit-coverage.json").read_text())
    for view in ("final model", "all iterates"):
        assert 0.85 <= summary["simulated"][view]["coverage"] <= 0.95 and summary["simulated"][view]["flagged"] < 0.02
    assert summary["runs"]["all iterates"]["coverage"] >= 0.8 and summary["runs"]["setting"]["seeds"] >= 20
    assert summary["simulated"]["two spreads"]["median"] > 1.1 * summary["simulated"]["epsilon_exact"]
    table = coverage_table(summary)
    assert "| 128 | 64 | 3.03 |" in table and "| 4,096 | 2,048 | 6.42 |" in table
    assert table in PAGE.read_text(encoding="utf-8")
