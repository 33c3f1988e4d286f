"""The console reads well (issue 39, item 8), each finding of a new user's held-out runs checked on constructed run
folders and metrics: failures grouped by kind in plain text with one figure for one share, a replaced actor said,
no Chance-only table, shares in percent in every table, the report's path said once, an old config key in one line,
an interrupted run's phase, a plugin scorer's headline, deploy-local's last line, ``flwr run``'s report line, the
how-to's run config as a TOML file, and the page that says how each table is chosen."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from leakbed import report
from leakbed.commands import experiment
from leakbed.failure_kinds import failure_kinds, failure_text
from tests.conftest import REPO
from tests.leakbed.test_report_format import reid, run_folder, summary


def ray_died(actor: str, pid: int) -> str:
    """A reply's reason as the server files it: Flower's wrap of Ray's ActorDiedError, cut at 200 characters."""
    text = (f"The actor died unexpectedly before finishing this task.\n\tclass_name: ClientAppActor\n\tactor_id: {actor}\n"
            f"\tpid: {pid}\n\tnamespace: 5c2e1f0a-77aa-4d3e-9f00-1b2c3d4e5f60\n\tip: 172.17.0.2\nThe actor is dead because "
            "its worker process has died.")  # fmt: skip
    return f"error: <class 'ray.exceptions.ActorDiedError'>:<'{text}'>"[:200]


WHY = {ray_died("5f1c2b3a9d8e7f6a01000000", 4242): 1, ray_died("a07c2b3a9d8e7f6a01000000", 4300): 1,
       ray_died("0b9e8d7c6b5a4f3e01000000", 977): 1, "rejected: update holds 3 non-finite values": 1}  # fmt: skip
REPLIES = {"sampled": 40, "failed": 2, "rejected": 1, "used": 37, "failed_share": 0.075, "max_failed_share": 0.05,
           "too_many_failed": True, "why": WHY, "users": 4, "users_in_updates": 4}  # fmt: skip
DIED = "ActorDiedError: The actor died unexpectedly before finishing this task"


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps cells at a narrower console


# --- failures: by kind, plain text, one figure -------------------------------------------------------------------


def test_failures_are_grouped_by_kind_without_ids() -> None:
    assert failure_kinds(WHY) == [(3, "failed", DIED), (1, "rejected", "update holds 3 non-finite values")]
    assert failure_text(WHY) == f"3 failed: {DIED}; 1 rejected: update holds 3 non-finite values"
    many = {f"error: kind {i} broke": 1 for i in range(5)}
    assert failure_text(many).endswith("; 2 more of 2 other kinds")


def test_the_console_says_the_failures_once_in_plain_text_with_one_figure(tmp_path: Path, capsys, wide) -> None:
    run = run_folder(tmp_path / "run", random={**summary("random", reid()), "replies": REPLIES})
    experiment.print_tables(run)
    assert experiment.failed_replies(run) == 1
    out, err = capsys.readouterr()
    said = [line for line in out.splitlines() if "replies failed" in line]
    assert len(said) == 1, out
    assert f"(7.5%): 3 failed: {DIED}; 1 rejected: update holds 3 non-finite values" in said[0], said
    assert "1x" not in out and "actor_id" not in out and "<class" not in out and "\\" not in out and "**" not in out
    assert err.count("\n") == 1 and "7.5%" in err and "8%" not in err and "more than fl.max_failed_share 5% allows" in err
    assert DIED not in err  # the reasons are said once, on the replies line


def test_the_report_groups_the_failures_too(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "run", random={**summary("random", reid()), "replies": REPLIES})
    text = report.write_report(run).read_text()
    assert f"3 failed: {DIED}" in text and "\\<class" not in text and "actor\\_id" not in text


# --- a dead actor replaced ------------------------------------------------------------------------------------------


def test_a_replaced_actor_is_said_on_the_console_and_in_the_report(tmp_path: Path, capsys, wide) -> None:
    from leakbed.apps import note_replaced

    run = run_folder(tmp_path / "run", random={**summary("random", reid()), "replies": {**REPLIES, "too_many_failed": False}})
    note_replaced(run / "random" / "metrics.json", 2)
    note_replaced(run / "random" / "metrics.json", 0)  # none replaced: nothing filed
    assert json.loads((run / "random" / "metrics.json").read_text())["replies"]["actors_replaced"] == 2
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert "2 ClientApp actors died and were replaced by a new one" in out, out
    assert "2 ClientApp actors died and were replaced" in report.write_report(run).read_text()


# --- no Chance-only table -------------------------------------------------------------------------------------------


def test_a_suite_without_closed_world_attackers_prints_no_chance_only_table(tmp_path: Path, capsys, wide) -> None:
    prior = summary("random", reid(), {"property": {"auc": 0.75, "chance": 0.5, "updates": 8}})
    prior["attackers"] = {}
    run = run_folder(tmp_path / "run", random=prior)
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert "Chance" not in out and "Re-identification (closed world)" not in out
    assert report.NO_CLOSED_WORLD in " ".join(out.split()) and "AUC 75.0%" in out
    text = report.write_report(run).read_text()
    assert "| Chance |" not in text and report.NO_CLOSED_WORLD in text


# --- one unit: shares in percent --------------------------------------------------------------------------------------


def test_ap_is_a_percentage_in_every_table(tmp_path: Path, capsys, wide) -> None:
    suite = {"open-world": {"ap": 0.3374, "chance_ap": 0.05, "updates": 24}}
    run = run_folder(tmp_path / "run", random=summary("random", reid(), suite))
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert "AP 33.7%" in out and "5.0% (6.7×)" in out and "0.337" not in out and "0.050" not in out
    text = report.write_report(run).read_text()
    assert "- ap 33.7%, chance_ap 5.0%, updates 24" in text and "0.337" not in text
    assert report.UNITS in text  # and the report says so


# --- the report's path said once ------------------------------------------------------------------------------------


def test_the_report_path_is_said_once(tmp_path: Path, capsys, wide) -> None:
    from leakbed.commands.run import report as report_command

    run = run_folder(tmp_path / "run", random=summary("random", reid(), {"property": {"auc": 0.75, "updates": 8}}))
    (run / "config.toml").write_text('name = "x"\n')
    assert report_command(str(run)) == 0
    out = capsys.readouterr().out
    assert out.count("report.md") == 1 and out.splitlines()[-1] == f"report: {run / 'report.md'}", out


# --- an old config key: one line -------------------------------------------------------------------------------------


def test_an_old_config_key_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    from leakbed import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.toml").write_text('name = "old"\n[attack]\nworkers = 1\n')
    assert cli.main(["validate", "old.toml", "--set", "fl.rounds=2"]) == 0
    captured = capsys.readouterr()
    assert "count = 1" in captured.out
    assert captured.err == "leakbed: note: attack.workers is now workers.count: read as such\n", captured.err


def test_other_warnings_still_show_as_python_shows_them(capsys, monkeypatch) -> None:
    import warnings

    from leakbed.console import notes_in_one_line
    from leakbed.core.config import ConfigKeyMoved

    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *_args, **_kw: shown.append(str(message)))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with notes_in_one_line():
            warnings.warn("not leakbed's", UserWarning, stacklevel=1)
            warnings.warn("a.b is now c.d: read as such", ConfigKeyMoved, stacklevel=1)
    assert shown == ["not leakbed's"]  # as Python (here: the previous hook) shows it
    assert capsys.readouterr().err == "leakbed: note: a.b is now c.d: read as such\n"


# --- an interrupted run's phase ---------------------------------------------------------------------------------------


def test_a_run_interrupted_in_the_attack_phase_says_so(tmp_path: Path) -> None:
    from leakbed.run_state import mark_interrupted

    cfg = SimpleNamespace(split=SimpleNamespace(priors=["random", "chrono"]), fl=SimpleNamespace(rounds=20))
    run = tmp_path / "run"
    for rule, rnd in (("random", 20), ("chrono", 7)):
        (run / rule).mkdir(parents=True)
        attack = {"analysed": 18, "fits": 3, "fitted": 1} if rnd == 20 else {"analysed": 5}
        (run / rule / "progress.json").write_text(json.dumps({"round": rnd, "rounds": 20, "utility": 0.3, "attack": attack}))
    line = mark_interrupted(cfg, run, "SIGINT")  # type: ignore[arg-type]
    assert "round 20 of 20" not in line
    assert ("the random prior interrupted after its 20 FL rounds, while its attacks were fitted and scored (18 of 20 "
            "rounds analysed, 1 of 3 fits done); the chrono prior interrupted at round 7 of 20") in line, line  # fmt: skip
    assert json.loads((run / "interrupted.json").read_text())["priors"]["random"]["phase"] == "attacks"


# --- a plugin's own scorer: its headline -------------------------------------------------------------------------


def test_a_plugin_scorer_without_a_headline_metric_gets_no_chance_from_another_key() -> None:
    own = {"precision": 0.5, "recall": 0.4, "f1": 0.3, "loss": 2.5, "entropy": 1.25, "x_chance": 9.0, "scored_by": "plugin"}
    runs = {"random": {**summary("random", reid()), "plugin_scored": {"mine": own}}}
    _, rows = report.plugin_rows(runs)
    assert rows == [["random", "mine (plugin-scored)", "precision 50.0%, recall 40.0%, f1 30.0%, loss 2.500 (+1 in the report)",
                     "-", "-"]]  # fmt: skip
    # with a headline metric, its own chance and their ratio (not the x_chance key's 9.0)
    runs["random"]["plugin_scored"]["mine"] = {"accuracy": 0.6, "chance": 0.2, "x_chance": 9.0, "scored_by": "plugin"}
    assert report.plugin_rows(runs)[1][0][2:4] == ["accuracy 60.0%", "20.0% (3.0×)"]


# --- deploy-local's last line ----------------------------------------------------------------------------------------


def test_deploy_local_says_something_after_finished() -> None:
    from leakbed.deploy_local import finished_line

    none = {"round": 3.0, "ap": {}, "x_chance": {}}
    said = finished_line("random", none)
    assert said == "[random] finished after round 3; no attack exported an AP (its numbers are in the report)"
    some = {"round": 3.0, "ap": {"svm": 0.3374, "mine": 0.9}, "x_chance": {"svm": 3.1}, "plugin_scored": ["mine"]}
    said = finished_line("random", some)
    assert said == "[random] finished after round 3: mine AP 90.0% (plugin-scored), svm AP 33.7% (3.1× chance)"


# --- flwr run says where the report went ------------------------------------------------------------------------------


def test_the_server_app_logs_where_the_report_went(tmp_path: Path, monkeypatch, caplog) -> None:
    from leakbed import apps, ray_actors

    cfg = SimpleNamespace(name="x", fl=SimpleNamespace(rounds=2), telemetry=None)
    out = tmp_path / "run"

    def federation(*_args: object) -> dict:
        ray_actors.REPLACED["count"] += 1  # an actor died during the run
        (out / "random").mkdir(parents=True, exist_ok=True)
        (out / "random" / "metrics.json").write_text(json.dumps({"replies": dict(REPLIES)}))
        return {}

    monkeypatch.setattr(ray_actors, "install", lambda: False)
    monkeypatch.setattr(apps, "checked", lambda *_: (cfg, "random", {}))
    monkeypatch.setattr(apps, "claim", lambda *_: None)
    monkeypatch.setattr(apps, "RunJudge", lambda *_: None)
    monkeypatch.setattr(apps, "ServerDefenses", lambda *_: None)
    monkeypatch.setattr(apps, "run_federation", federation)
    monkeypatch.setattr(apps, "write_report", lambda root: root / "report.md")
    monkeypatch.setattr(apps, "hold_metrics", lambda *_: None)
    context = SimpleNamespace(run_config={"out-dir": str(out)}, run_id=1)
    with caplog.at_level(logging.INFO, logger="flwr"):
        apps.main(None, context)  # type: ignore[arg-type]
    assert f"leakbed: random prior finished; report: {out / 'report.md'}" in caplog.messages
    assert json.loads((out / "random" / "metrics.json").read_text())["replies"]["actors_replaced"] == 1


# --- docs: the run config as a TOML file, and how the tables are chosen ------------------------------------------------


def test_the_how_to_passes_the_run_config_as_a_toml_file(tmp_path: Path) -> None:
    from flwr.common.config import parse_config_args

    from leakbed.core.config import split_overrides

    page = (REPO / "docs" / "how-to" / "flwr-run.md").read_text()
    assert not re.search(r"--run-config \"", page) and "--run-config run.toml" in page
    example = re.search(r"```toml\n(.*?)```", page, re.S)
    assert example, "no TOML example"
    (tmp_path / "run.toml").write_text(example.group(1))
    parsed = parse_config_args([str(tmp_path / "run.toml")])  # as flwr run reads it
    assert parsed["config"] == "quickstart" and Path(parsed["out-dir"]).is_absolute()
    assert split_overrides(parsed["set"])[-1] == 'attack.suite=["mlp", "knn"]'  # no shell quoting in a file


def test_the_tables_page_exists_is_in_the_site_and_the_report_names_it(tmp_path: Path) -> None:
    page = REPO / report.TABLES_PAGE
    text = page.read_text()
    for words in ("headline metric", "Chance", "plugin", "percentage", "grouped by kind", "no table"):
        assert words in text, words
    assert "explanation/tables.md" in (REPO / "mkdocs.yml").read_text()
    run = run_folder(tmp_path / "run", random=summary("random", reid()))
    assert report.TABLES_LINE in report.write_report(run).read_text()
