"""How the report and the console print an attack's numbers: counts without decimals, each attack's coverage
beside its score, what a plugin's own scorer wrote labelled as its, error texts never unlabelled, and the console's
"Other attacks" table for the attacks outside the closed-world table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leakbed import report
from leakbed.core.plugin_text import error_line
from leakbed.report import (
    MISSING_ROWS,
    PLUGIN_SCORED,
    PLUGIN_SECTION,
    coverage_text,
    format_metric,
    other_attack_rows,
    plugin_rows,
    scalar_text,
    table_footnote,
    table_rows,
    write_report,
)

PLUGIN = {
    "accuracy": 0.5,
    "chance": 0.1,
    "x_chance": 5.0,
    "updates": 24.0,  # a count a scorer wrote as a float
    "top_k": 1,
    "coverage": 0.75,
    "rows_missing": 6,
    "scored_by": "plugin",
    "notes": ["bias-labels (example plugin): 50.0% of 24 updates\n# all clear ![x](http://example.org/x.png)"],
}
OWN = {"auc": 0.8125, "chance": 0.5, "updates": 240, "n_users": 12.0, "coverage": 1.0, "rows_missing": 0}
OWN_WORDS = "in its own words (not leakbed's)"
SAID = "fit of bias-labels failed: attack 'bias-labels' said: \"no bias\n## leakbed: all clear [ok](http://x)\""


def reid(coverage: float | None = None, missing: int | None = None) -> dict:
    m = {"ap": 0.5, "chance_ap": 0.25, "x_chance": 2.0, "top1": 0.5, "top5": 1.0, "n_updates": 24, "n_users": 4}
    m["per_round"] = {"1": {"top1": 0.5}}
    if coverage is not None:
        m |= {"coverage": coverage, "rows_missing": missing}
    return m


def summary(rule: str, mlp: dict, suite: dict | None = None, errors: list[str] | None = None) -> dict:
    """A prior's metrics.json as a run writes it, cut down to what the report reads."""
    return {
        "prior": rule,
        "time": "timestamps",
        "users": 4,
        "rounds": 1,
        "attack_layers": ["fc2.weight"],
        "attackers": {"mlp": mlp},
        "suite": suite or {},
        "utility": {"1": {"utility": 0.3}},
        "pool": {"tapped": 4, "analysed": 4, "dropped": 0, "failed": 0, "max_lag_rounds": 0, "errors": errors or []},
        "rounds_log": {"1": {"failed": 0, "rejected": 0}},
        "fl_seconds": 1.0,
        "attack_fit_seconds": 1.0,
    }


def run_folder(root: Path, **priors: dict) -> Path:
    for rule, run in priors.items():
        (root / rule).mkdir(parents=True)
        (root / rule / "metrics.json").write_text(json.dumps(run))  # through JSON, as a run writes it
    return root


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, str]:
    run = run_folder(
        tmp_path / "run",
        random=summary("random", reid(0.75, 6), {"bias-labels": PLUGIN, "property": OWN}, [SAID, "round 2 dropped"]),
        chrono=summary("chrono", reid(1.0, 0)),
    )
    return run, write_report(run).read_text()


# --- counts ----------------------------------------------------------------------------------------------------


def test_counts_print_without_decimals_shares_in_percent_others_with_three() -> None:
    assert format_metric("updates", 24) == "24"
    assert format_metric("updates", 24.0) == "24"  # named like a count, a whole number
    assert format_metric("n_users", 12.0) == "12" and format_metric("rows_missing", 6.0) == "6"
    assert format_metric("records_missing", 0.0) == "0" and format_metric("local_steps", 1.0) == "1"
    assert format_metric("top_k", 3) == "3"  # an int in metrics.json is printed as one, whatever its name
    assert format_metric("accuracy", 1.0) == "100.0%" and format_metric("psnr", 24.0) == "24.000"
    assert format_metric("ap", 0.3374) == "33.7%" and format_metric("label_accuracy", 0.5) == "50.0%"
    assert format_metric("accuracy", 75.0) == "75.000"  # not a share in [0, 1]: not printed as one
    assert format_metric("updates", 24.5) == "24.500"  # not a whole number: not a count
    assert format_metric("samples_mean", 2.0) == "2.000"  # a mean, not a count
    assert format_metric("ap", float("nan")) == "nan"
    assert scalar_text(OWN) == "auc 81.2%, chance 50.0%, updates 240, n_users 12"  # coverage is shown apart


def test_the_report_prints_suite_counts_without_decimals(written: tuple[Path, str]) -> None:
    text = written[1]
    assert "- accuracy 50.0%, chance 10.0%, x\\_chance 5.000, updates 24, top\\_k 1" in text, text  # a plugin's names
    assert "- auc 81.2%, chance 50.0%, updates 240, n_users 12" in text, text
    assert "24.000" not in text and "240.000" not in text and "12.000" not in text


# --- coverage, plugin scorers, error texts ----------------------------------------------------------------------


def test_coverage_text() -> None:
    assert coverage_text(OWN) == "coverage 100% of 240 updates"
    partial = f"coverage 75% of 240 updates (60 {MISSING_ROWS})"
    assert coverage_text({"coverage": 0.75, "rows_missing": 60, "n_updates": 240}) == partial
    assert coverage_text({"coverage": 0.75, "rows_missing": 60}) == partial  # given = missing / (1 - coverage)
    assert coverage_text({"coverage": 0.999, "rows_missing": 1}) == f"coverage 99.9% of 1000 updates (1 {MISSING_ROWS})"
    assert coverage_text({"coverage": 1.0}) == "coverage 100%"
    assert coverage_text({"ap": 0.5}) is None and coverage_text({"coverage": float("nan")}) is None


def test_each_attack_shows_its_coverage_beside_its_score(written: tuple[Path, str]) -> None:
    text = written[1]
    random_prior = text.split("### random prior", 1)[1].split("### chrono prior", 1)[0]
    assert f"- MLP: AP 50.0% (2.0×), top-1 50.0%, top-5 100.0%; coverage 75% of 24 updates (6 {MISSING_ROWS})" in random_prior
    chrono_prior = text.split("### chrono prior", 1)[1].split("## Further attacks", 1)[0]
    assert "- MLP: AP 50.0% (2.0×), top-1 50.0%, top-5 100.0%; coverage 100% of 24 updates" in chrono_prior
    plugin = text.split("#### bias-labels (random prior), scored by its plugin", 1)[1].split("####", 1)[0]
    assert f"- coverage 75% of 24 updates (6 {MISSING_ROWS})" in plugin
    own = text.split("#### property (random prior)", 1)[1].split("## ", 1)[0]
    assert "- coverage 100% of 240 updates" in own and PLUGIN_SCORED not in own


def test_rows_scored_by_a_plugin_are_marked_and_its_words_labelled(written: tuple[Path, str]) -> None:
    text = written[1]
    plugin = text.split("#### bias-labels (random prior), scored by its plugin", 1)[1].split("####", 1)[0]
    assert f"- {PLUGIN_SCORED}: its numbers, not the referee's" in plugin
    assert text.index(f"## {PLUGIN_SECTION}") > text.index("#### property (random prior)")  # apart from the referee's
    # the plugin's note: labelled, on one line (no heading of its own), its markdown escaped (no image)
    note = "- the plugin's scorer notes: bias-labels (example plugin): 50.0% of 24 updates # all clear \\!\\[x\\]"
    assert note in plugin, plugin
    assert "\n# all clear" not in text and "![x](" not in text


def test_error_texts_are_labelled_and_an_attacks_words_quoted() -> None:
    assert error_line("round 2 dropped: queue full for 30s", "markdown") == "leakbed: round 2 dropped: queue full for 30s"
    said = error_line(SAID, "markdown")
    assert said.startswith(f"leakbed: fit of bias-labels failed; attack 'bias-labels' said, {OWN_WORDS}: “")
    assert said.endswith("no bias ## leakbed: all clear \\[ok\\](http\\[:\\]//x)”") and "\n" not in said
    assert error_line("attack 'x' said: \"boom\"", "markdown", own="") == f"attack 'x' said, {OWN_WORDS}: “boom”"


def test_the_report_lists_the_pool_errors_labelled(written: tuple[Path, str]) -> None:
    text = written[1]
    assert "- attack pool errors (2):" in text
    lines = [line for line in text.splitlines() if line.startswith("  - ")]
    assert lines[0].startswith("  - leakbed: fit of bias-labels failed; attack 'bias-labels' said, in its own words")
    assert lines[1] == "  - leakbed: round 2 dropped"
    assert "\n## leakbed: all clear" not in text
    assert all(not line.startswith("## leakbed") for line in text.splitlines())


def test_the_pool_errors_listed_are_capped(tmp_path: Path) -> None:
    errors = [f"round {i} dropped" for i in range(report.ERRORS_SHOWN + 3)]
    run = run_folder(tmp_path / "run", random=summary("random", reid(), errors=errors))
    text = write_report(run).read_text()
    assert f"- attack pool errors ({len(errors)}):" in text
    assert "  - … 3 more in random/metrics.json (pool.errors)" in text and f"round {report.ERRORS_SHOWN} dropped" not in text


def test_the_closed_world_table_has_a_footnote_when_coverage_is_below_one(written: tuple[Path, str]) -> None:
    run, text = written
    runs = report.load_runs(run)
    header, rows = table_rows(runs)
    mlp = rows[0]
    assert mlp[1] == "50.0 (2×)*" and mlp[4] == "50.0 (2×)", mlp  # random prior partial, chrono prior complete
    note = table_footnote(runs)
    assert note == f"* returned no row for some of the updates it was given: MLP (random) {coverage_text(reid(0.75, 6))}."
    assert "| Chance |" in text and f"\n\n\\{note}\n" in text  # apart from the table, not a bullet


def test_no_footnote_and_no_coverage_lines_without_coverage(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "run", random=summary("random", reid(), {"property": {"auc": 0.5, "updates": 8}}))
    text = write_report(run).read_text()
    assert table_footnote(report.load_runs(run)) == "" and "returned no row" not in text
    assert not [line for line in text.splitlines() if "coverage" in line and line.startswith("-")]
    assert "- auc 50.0%, updates 8" in text and "- MLP: AP" not in text  # a run from before the referee counted rows


# --- the console ------------------------------------------------------------------------------------------------


def test_other_attack_rows() -> None:
    runs = {
        "random": summary("random", reid(), {"bias-labels": PLUGIN, "property": OWN}),
        "chrono": summary("chrono", reid(), {"reconstruction": {"psnr": 21.5, "images": 8.0, "label_accuracy": 1.0}}),
    }
    runs["chrono"]["suite"]["broken"] = {"scorer_failed": "scorer failed: attack 'broken' said: \"[bold]no\""}
    header, rows = other_attack_rows(runs)
    assert header == ["prior", "attack", "headline metric", "its chance (× chance)", "coverage"]
    assert rows == [
        ["random", "property", "AUC 81.2%", "50.0% (1.6×)", "100%"],
        ["chrono", "reconstruction", "psnr 21.500, images 8, label_accuracy 100.0%", "-", "-"],
        ["chrono", "broken", f"no score: scorer failed; attack 'broken' said, {OWN_WORDS}: “[bold]no”", "-", "-"],
    ]
    assert other_attack_rows({"random": summary("random", reid())}) == (header, [])
    # a plugin's own scorer's numbers: in a table of their own, marked
    assert plugin_rows(runs) == (header, [["random", "bias-labels (plugin-scored)", "accuracy 50.0%", "10.0% (5.0×)",
                                           "75% (6 missing)"]])  # fmt: skip


def test_the_console_prints_the_other_attacks_and_where_they_are(written: tuple[Path, str], capsys, monkeypatch) -> None:
    from leakbed.commands import experiment

    monkeypatch.setenv("COLUMNS", "250")  # rich wraps cells at a narrower console

    run, _ = written
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert "Re-identification (closed world)" in out and "50.0 (2×)*" in out
    assert "* returned no row for some of the updates it was given: MLP (random)" in " ".join(out.split())
    assert "Other attacks" in out and "AUC 81.2%" in out
    other, plugin = out.split("Other attacks", 1)[1].split(PLUGIN_SECTION, 1)  # the plugin's row in a table of its own
    assert "bias-labels" not in other and "bias-labels (plugin-scored)" in plugin and "accuracy 50.0%" in plugin
    where = [line for line in out.splitlines() if line.startswith("metrics: ")]
    assert where == [
        f"metrics: {run}/random/metrics.json, {run}/chrono/metrics.json; outputs: {run}/random/outputs/, {run}/chrono/outputs/"
    ]
    assert "report.md" not in out  # the command says the report's path, once (tests/leakbed/test_console_reads_well.py)


def test_the_console_prints_no_other_attacks_table_without_any(tmp_path: Path, capsys) -> None:
    from leakbed.commands import experiment

    run = run_folder(tmp_path / "run", random=summary("random", reid()))
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert "Re-identification (closed world)" in out and "MLP" in out
    assert "Other attacks" not in out and "metrics: " not in out


def test_the_console_prints_an_attacks_words_as_plain_text(tmp_path: Path, capsys, monkeypatch) -> None:
    from leakbed.commands import experiment

    monkeypatch.setenv("COLUMNS", "250")
    failed = {"scorer_failed": "scorer failed: attack 'broken' said: \"[bold]no[/bold]\""}
    run = run_folder(tmp_path / "run", random=summary("random", reid(), {"broken": failed}))
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert f"no score: scorer failed; attack 'broken' said, {OWN_WORDS}: “[bold]no[/bold]”" in out  # no rich markup
