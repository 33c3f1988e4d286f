"""Bad input is refused before anything starts (issue 13): one line naming the field, exit 2, and no
run folder written (or an existing one left as it was). ``run_experiment`` is replaced by a tripwire,
so a check that lets bad input through fails the test at once instead of starting Ray."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import leakbed.cli as cli
from leakbed.commands import experiment
from leakbed.core.config import build_config, dump_config
from leakbed.core.data import federation
from leakbed.core.models import build_model

TINY = [
    "data.synthetic.users=6",
    "data.synthetic.examples_per_user=40",
    "data.synthetic.image_size=8",
    "fl.rounds=1",
    "workers.count=1",
    "workers.sandbox='off'",
]
WORDS = "the cat sat on a mat while my dog ran over green hills and red roads to see old friends".split()


@pytest.fixture(autouse=True)
def _tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input got through: a run started")

    monkeypatch.setattr(experiment, "run_experiment", started)


def refused(capsys: pytest.CaptureFixture[str], out: Path, *sets: str, command: str = "run") -> str:
    """``leakbed run --out OUT --set ...``: exit 2, one line on stderr, OUT not written; the message."""
    argv = [command, *(["--out", str(out)] if command == "run" else []), *(a for s in sets for a in ("--set", s))]
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and err.startswith("leakbed: error: "), err
    assert not out.exists()
    return err.removeprefix("leakbed: error: ")


def text_table(path: Path, *, labels: bool, timestamps: bool = False) -> Path:
    """Three users with six short posts each: a text table without attribute or property columns."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(3):
        for k in range(6):
            row = {"user_id": f"u{u}", "text": " ".join(rng.choice(WORDS, 8))}
            if labels:
                row["label"] = ["pos", "neg"][(u + k) % 2]
            if timestamps:
                row["timestamp"] = 1000 * u + 10 * (6 - k)
            rows.append(row)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def table(path: Path, **kw: bool) -> list[str]:
    return ["data.source='table'", f"data.path='{text_table(path, **kw)}'", "data.min_examples=2", "fl.rounds=1"]


def leaf_folder(root: Path) -> Path:
    """A tiny LEAF image shard (8x8 images, as FEMNIST's format): three writers of six images."""
    rng = np.random.default_rng(1)
    users = ["w0", "w1", "w2"]
    doc = {
        "users": users,
        "num_samples": [6] * 3,
        "user_data": {u: {"x": rng.random((6, 64)).round(3).tolist(), "y": [k % 3 for k in range(6)]} for u in users},
    }
    (root / "train").mkdir(parents=True)
    (root / "train" / "a.json").write_text(json.dumps(doc))
    return root


def leaf(root: Path) -> list[str]:
    return ["data.source='leaf'", f"data.path='{leaf_folder(root)}'", "data.min_examples=2", "data.image_size=8", "fl.rounds=1"]


# --- the suite attacks' declared needs ---------------------------------------------------------


def test_cross_modal_on_text_data(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *table(tmp_path / "posts.jsonl", labels=False), 'split.priors=["random"]',
                  "attack.suite=['cross-modal']")  # fmt: skip
    assert msg == "attack.suite: 'cross-modal' needs image data; data.source 'table' (posts) is text"


@pytest.mark.long
def test_attributes_without_attribute_columns(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *table(tmp_path / "posts.jsonl", labels=True), 'split.priors=["random"]',
                  "attack.suite=['attributes']")  # fmt: skip
    assert msg.startswith("attack.suite: 'attributes' needs per-user attribute columns (constant within each user")
    assert msg.endswith("data.source 'table' (posts) has none")


@pytest.mark.long
def test_attributes_named_column_the_data_lacks(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "attack.suite=['attributes']", "attack.params.attributes.columns=['age']")
    assert msg.startswith("attack.params.attributes.columns: attribute column 'age' is not in every user's data; have [")


@pytest.mark.long
def test_profile_class_the_data_lacks(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "attack.suite=['profile']", "attack.params.profile.target_class=12")
    assert msg == "attack.params.profile.target_class = 12: data.source 'synthetic' (synthetic) has classes 0..9"


def test_profile_on_a_next_token_task(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *table(tmp_path / "posts.jsonl", labels=False), 'split.priors=["random"]',
                  "attack.suite=['profile']")  # fmt: skip
    assert msg == "attack.suite: 'profile' needs a multiclass task; data.source 'table' (posts) is next-token"


@pytest.mark.parametrize("attack", ["property", "aggregate-property"])
def test_property_attack_without_a_property_column(tmp_path, capsys, attack):
    msg = refused(capsys, tmp_path / "out", *table(tmp_path / "posts.jsonl", labels=True), 'split.priors=["random"]',
                  f"attack.suite=['{attack}']")  # fmt: skip
    assert msg == f"attack.suite: '{attack}' needs a per-example 'property' column; data.source 'table' (posts) has none"


def test_membership_on_image_data(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "attack.suite=['membership']")
    assert msg == "attack.suite: 'membership' needs text data; data.source 'synthetic' (synthetic) is image"


def test_unknown_suite_attack(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "attack.suite=['nope']")
    assert msg.startswith("attack.suite: unknown attack 'nope' (known: ") and "cross-modal" in msg
    close = refused(capsys, tmp_path / "out2", *TINY, "attack.suite=['knm']")  # the closest published name
    assert close.startswith("attack.suite: unknown attack 'knm'; did you mean 'knn'? (known: ")


# --- chrono needs timestamps -------------------------------------------------------------------

CHRONO_REFUSED = (
    "split.priors: 'chrono' needs timestamps and {} data {!r} has none (its t is the row order); "
    "set split.chrono_row_order = true to use row order"
)


def validate(*sets: str) -> int:
    return cli.main(["validate", *(a for s in sets for a in ("--set", s))])


def test_chrono_on_leaf_without_the_opt_in(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *leaf(tmp_path / "leafdata"))  # default priors: random and chrono
    assert msg == CHRONO_REFUSED.format("leaf", "leafdata")


def test_chrono_on_a_table_without_timestamps(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *table(tmp_path / "posts.jsonl", labels=True), 'split.priors=["chrono"]')
    assert msg == CHRONO_REFUSED.format("table", "posts")


def test_chrono_accepted_with_the_opt_in_or_timestamps(tmp_path, capsys):
    assert validate(*leaf(tmp_path / "leafdata"), "split.chrono_row_order=true") == 0
    assert "chrono_row_order = true" in capsys.readouterr().out
    assert validate(*table(tmp_path / "posts.jsonl", labels=True, timestamps=True), 'split.priors=["chrono"]') == 0
    cfg = build_config({}, [*leaf(tmp_path / "again"), "split.chrono_row_order=true"])
    assert federation(cfg, "chrono").corpus.time == "row order"


# --- model.weights_path ------------------------------------------------------------------------


def test_weights_path_missing(tmp_path, capsys):
    path = tmp_path / "nope.pt"
    msg = refused(capsys, tmp_path / "out", *TINY, f"model.weights_path='{path}'")
    assert msg == f"model.weights_path = '{path}': no such file"


def test_weights_path_text_file(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    path.write_text("not weights\n")
    msg = refused(capsys, tmp_path / "out", *TINY, f"model.weights_path='{path}'")
    assert msg.startswith(f"model.weights_path = '{path}': not a torch state dict (")


def test_weights_path_pickled_list(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    torch.save([torch.zeros(2), torch.ones(3)], path)
    msg = refused(capsys, tmp_path / "out", *TINY, f"model.weights_path='{path}'")
    assert msg == f"model.weights_path = '{path}': holds a list, not a state dict of name -> tensor"


def test_weights_path_wrong_shapes_and_keys(tmp_path, capsys):
    cfg = build_config({}, TINY)
    state = build_model(cfg.model, federation(cfg, "random").corpus).state_dict()
    wrong = tmp_path / "wrong-shape.pt"
    torch.save({**state, "fc2.weight": torch.zeros(3, 128)}, wrong)
    msg = refused(capsys, tmp_path / "out", *TINY, f"model.weights_path='{wrong}'")
    assert msg == f"model.weights_path = '{wrong}': fc2.weight has shape (3, 128), the built model needs (10, 128)"
    other = tmp_path / "other-model.pt"
    torch.save({k: v for k, v in state.items() if k != "fc2.bias"}, other)
    msg = refused(capsys, tmp_path / "out", *TINY, f"model.weights_path='{other}'")
    assert msg == f"model.weights_path = '{other}': keys do not fit the built model (missing 'fc2.bias')"


# --- corrupt or partial run folders --------------------------------------------------------------


def summary(rule: str, time: str = "timestamps") -> dict:
    """A prior's metrics.json as a run writes it, cut down to what the report reads."""
    return {
        "prior": rule,
        "time": time,
        "users": 4,
        "rounds": 1,
        "attack_layers": ["fc2.weight"],
        "attackers": {
            "mlp": {"ap": 0.5, "chance_ap": 0.25, "x_chance": 2.0, "top1": 0.5, "top5": 1.0, "per_round": {"1": {"top1": 0.5}}}
        },
        "utility": {"1": {"utility": 0.3}},
        "pool": {"tapped": 4, "analysed": 4, "dropped": 0, "failed": 0, "max_lag_rounds": 0, "errors": []},
        "rounds_log": {"1": {"failed": 0, "rejected": 0}},
        "fl_seconds": 1.0,
        "attack_fit_seconds": 1.0,
    }


def run_folder(root: Path, priors: dict[str, str | None], config: bool = True) -> Path:
    """A finished-looking run: config.toml and per prior a metrics.json with the given text (None: folder only)."""
    root.mkdir()
    if config:
        (root / "config.toml").write_text(dump_config(build_config({}, TINY)))
    for rule, text in priors.items():
        (root / rule).mkdir()
        if text is not None:
            (root / rule / "metrics.json").write_text(text)
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def report_refused(capsys: pytest.CaptureFixture[str], run: Path, *argv: str) -> str:
    before = snapshot(run) if run.exists() else None
    code = cli.main([*argv, str(run)] if argv else ["report", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and err.startswith("leakbed: error: "), err
    assert (snapshot(run) if run.exists() else None) == before  # nothing written, nothing touched
    return err.removeprefix("leakbed: error: ")


def test_report_without_metrics(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {})
    assert report_refused(capsys, run) == f"no per-prior metrics.json under {run}"


def test_report_without_config(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": json.dumps(summary("random"))}, config=False)
    assert report_refused(capsys, run) == f"{run}: not a run folder (no config.toml)"


def test_report_with_a_corrupt_metrics_json(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": "{not json"})
    msg = report_refused(capsys, run)
    assert msg.startswith(f"{run / 'random' / 'metrics.json'}: not a readable metrics.json (")


def test_report_with_a_truncated_prior_metrics_json(tmp_path, capsys):
    whole = json.dumps(summary("chrono"), indent=2)
    run = run_folder(tmp_path / "run", {"random": json.dumps(summary("random")), "chrono": whole[: len(whole) // 2]})
    msg = report_refused(capsys, run)
    assert msg.startswith(f"{run / 'chrono' / 'metrics.json'}: not a readable metrics.json (")


def test_report_with_an_incomplete_summary(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": json.dumps({"prior": "random"})})
    assert report_refused(capsys, run) == f"{run / 'random' / 'metrics.json'}: not a complete prior summary (no 'users')"


def test_report_with_a_prior_folder_without_metrics(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": json.dumps(summary("random")), "chrono": None})
    assert report_refused(capsys, run) == f"{run / 'chrono'}: prior folder without metrics.json (its run did not finish)"


def test_analyze_refuses_a_corrupt_metrics_json_before_running(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": '{"users": 4, "rou'})
    (run / "attack-store" / "random" / "global").mkdir(parents=True)
    msg = report_refused(capsys, run, "analyze", "progress")
    assert msg.startswith(f"{run / 'random' / 'metrics.json'}: not a readable metrics.json (")
    assert not (run / "analyses").exists()


def test_analyze_without_config(tmp_path, capsys):
    run = run_folder(tmp_path / "run", {"random": json.dumps(summary("random"))}, config=False)
    assert report_refused(capsys, run, "analyze", "progress") == f"{run}: not a finished run (no config.toml)"


def test_report_labels_a_row_order_chrono_prior(tmp_path, capsys):
    run = run_folder(
        tmp_path / "run", {"random": json.dumps(summary("random")), "chrono": json.dumps(summary("chrono", "row order"))}
    )
    assert cli.main(["report", str(run)]) == 0
    report = (run / "report.md").read_text()
    assert "### chrono (row order) prior" in report and "| chrono (row order) AP |" in report
    assert "### random prior" in report


# --- defenses the run's loop cannot apply ---------------------------------------------------------


def test_update_level_attack_under_secagg(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "fl.secure_aggregation='secagg+'", "attack.suite=['knn']")
    assert msg == (
        "attack.suite: 'knn' needs individual updates, but fl.secure_aggregation = 'secagg+' shows the server only "
        "aggregates (keep the attacks that read aggregates, e.g. 'aggregate-property')"
    )


def test_dp_fedavg_under_secagg(tmp_path, capsys):
    msg = refused(capsys, tmp_path / "out", *TINY, "fl.secure_aggregation='secagg+'", 'defenses=[{name="dp-fedavg"}]',
                  "attack.suite=['aggregate-property']", "data.synthetic.property_rate=0.5")  # fmt: skip
    assert msg == (
        "defenses.0: dp-fedavg needs Flower's server-side DP wrapper, which the legacy SecAgg+ workflow does not take; "
        "with fl.secure_aggregation = 'secagg+' use local-dp"
    )


# --- one mapping for every command (issue 39.5): a LeakbedError is one line and exit 2, wherever it is raised -------

EVERY_COMMAND = [  # (argv, what it says): real bad input each command refuses before anything starts
    (["run", "--set", "fl.rounds=0"], "fl.rounds"),
    (["validate", "--set", "fl.rounds=0"], "fl.rounds"),
    (["feature-inference", "--set", "fl.rounds=0"], "fl.rounds"),
    (["sweep", "quickstart"], "sweep: give --grid KEY=V1,V2,..."),
    (["open-world-sweep", "--seen", "2"], "--seen '2'"),
    (["deploy-local", "--set", "fl.rounds=0"], "fl.rounds"),
    (["analyze", "progress", "{tmp}/none"], "{tmp}/none: not a finished run (no config.toml)"),
    (["report", "{tmp}/none"], "{tmp}/none: no such run folder"),
    (["compose", "render", "--supernodes", "0"], "--supernodes must be 1..1000, got 0"),  # click's bound: same line
    (["sandbox-run", "--store", "{tmp}/none", "--", "true"], "--store {tmp}/none: no such folder"),
    (["run", "no-such-config"], "no-such-config: no such config file"),
]


@pytest.mark.parametrize(("argv", "says"), EVERY_COMMAND, ids=[" ".join(a[:2]) for a, _ in EVERY_COMMAND])
def test_every_command_refuses_bad_input_in_one_line(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an --out default or a sweep folder would land here: nothing is written
    code = cli.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("leakbed: error: "), err
    assert says.format(tmp=tmp_path) in err, err
    assert not list(tmp_path.iterdir())


ANYWHERE = [  # a command, and a function it calls that refuses
    (["run", "--out", "{tmp}/o"], "leakbed.commands.experiment.preflight"),
    (["compose", "up"], "leakbed.compose.check_counts"),
    (["analyze", "progress", "{tmp}"], "leakbed.analyze.run_analysis"),
    (["sandbox-run", "--store", "{tmp}", "--", "true"], "leakbed.workers.sandbox.check_store"),
    (["sweep", "quickstart", "--grid", "fl.rounds=1,2"], "leakbed.sweep.grid_points"),
]


@pytest.mark.parametrize(("argv", "where"), ANYWHERE, ids=[w.rsplit(".", 1)[1] for _, w in ANYWHERE])
def test_a_leakbed_error_anywhere_is_its_first_line_and_exit_2(argv, where, tmp_path, capsys, monkeypatch):
    """Raised from deep inside a command, with a second line: the CLI prints the first only, and exits 2."""
    from leakbed.core.errors import LeakbedError

    def refuse(*args: object, **kwargs: object) -> None:
        raise LeakbedError("a refusal\nand a second line nobody sees")

    monkeypatch.setattr(where, refuse)
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == "leakbed: error: a refusal\n"


@pytest.mark.parametrize("what", ["run", "deploy-local"])
def test_a_failure_after_the_start_is_one_line_and_exit_1(what, tmp_path, capsys, monkeypatch):
    """A ``Failed`` (the simulation, a local deployment): ``leakbed: <what> failed: ...`` and exit 1, mapped in the
    same place."""
    from leakbed.deploy_local import DeployError
    from leakbed.simulate import SimulationFailed

    error = SimulationFailed if what == "run" else DeployError

    def fail(*args: object, **kwargs: object) -> None:
        raise error("no device answered within fl.startup_timeout = 1 s\ntraceback text")

    if what == "run":
        monkeypatch.setattr(experiment, "run_experiment", fail)
    else:
        monkeypatch.setattr("leakbed.deploy_local.deploy_local", fail)
    argv = [what, "--out", str(tmp_path / "o"), *(["--set", "data.synthetic.users=6"] if what == "deploy-local" else [])]
    assert cli.main([*argv, *(a for s in TINY for a in ("--set", s))]) == 1
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == f"leakbed: {what} failed: no device answered within fl.startup_timeout = 1 s"
