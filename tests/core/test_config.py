import subprocess
import sys
import typing

import pytest
from pydantic import BaseModel

from leakbed.core.config import (
    ConfigError,
    ConfigKeyMoved,
    DefenseConfig,
    ExperimentConfig,
    build_config,
    dump_config,
    load_config,
    split_overrides,
)


def _fields(model: type[BaseModel], prefix: str = ""):
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _fields(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


@pytest.mark.parametrize("name,info", list(_fields(ExperimentConfig)) + list(_fields(DefenseConfig, "defenses[].")))
def test_every_field_has_default_bound_and_unit(name, info):
    # a defenses entry names its plugin: the one field without a default (its own parameters all have theirs)
    assert not info.is_required() or name == "defenses[].name", f"{name} has no default"
    assert info.description and "[" in info.description and info.description.endswith("]"), f"{name}: unit missing"
    bounded = any(hasattr(m, attr) for m in info.metadata for attr in ("ge", "gt", "le", "lt", "max_length", "min_length"))
    literal = typing.get_origin(info.annotation) is typing.Literal or "Literal" in str(info.annotation)
    assert bounded or literal, f"{name} has no bound"


def test_toml_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\n[fl]\nrounds = 7\n[data.synthetic]\nusers = 9\n')
    cfg = load_config(path, ["fl.lr=0.2", 'split.priors=["chrono"]', "attack.suite=['knn']", "attack.params.knn.k=3"])
    assert (cfg.name, cfg.fl.rounds, cfg.data.synthetic.users, cfg.fl.lr) == ("x", 7, 9, 0.2)
    assert cfg.split.priors == ["chrono"] and cfg.attack.suite == ["knn"] and cfg.attack.params == {"knn": {"k": 3}}


def test_core_holds_each_attacks_parameters_as_a_table_its_plugin_validates():
    """core.config knows the suite's names and a table per attack; an attack's own model validates it (leakbed.preflight)."""
    from leakbed.preflight import resolve

    cfg = build_config({}, ["attack.suite=['knn', 'matching']", "attack.params.matching.epochs=3"])
    frozen = resolve(cfg)
    assert frozen.attack.params["knn"] == {"k": 10} and frozen.attack.params["matching"]["epochs"] == 3
    assert frozen.attack.params["matching"]["eval_pairs"] == 10_000  # frozen with its defaults
    assert load_config(None, [f"attack.suite={frozen.attack.suite}"]).attack.suite == ["knn", "matching"]
    # checked against the attack's declared schema (its JSON schema, no attack code on the trusted side)
    with pytest.raises(ConfigError, match="^attack.params.matching.epochs: 0 is less than the minimum of 1$"):
        resolve(build_config({}, ["attack.suite=['matching']", "attack.params.matching.epochs=0"]))
    with pytest.raises(ConfigError, match=r"^attack.params.knn.neighbours: unknown parameter of 'knn' \(valid: k\)$"):
        resolve(build_config({}, ["attack.suite=['knn']", "attack.params.knn.neighbours=3"]))
    typo = r"^attack.params.matching.eval_pair: unknown parameter of 'matching'; did you mean 'eval_pairs'\? \(valid: "
    with pytest.raises(ConfigError, match=typo):
        resolve(build_config({}, ["attack.suite=['matching']", "attack.params.matching.eval_pair=3"]))
    with pytest.raises(ConfigError, match="attack.params: 'svm' is not an attack of attack.suite"):
        build_config({}, ["attack.suite=['knn']", "attack.params.svm.c=1"])


def test_frozen_config_round_trips(tmp_path):
    cfg = build_config({}, ["fl.rounds=3", "data.synthetic.bias=0"])
    path = tmp_path / "frozen.toml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


@pytest.mark.parametrize(
    "override,field",
    [
        ("fl.rounds=0", "fl.rounds"),
        ("fl.fraction_train=1.5", "fl.fraction_train"),
        ("attack.attackers=['mlp','mlp']", "attack.suite"),  # the old field, read as the new one (with a notice)
        ("data.source='bogus'", "data.source"),
        ("fl.nonsense=1", "fl.nonsense"),
        ("data.synthetic.bias=-0.1", "data.synthetic.bias"),
        ("split.priors=['random','random']", "split.priors"),
        ("attack.suite=['mlp','mlp']", "attack.suite"),
        ("attack.suite=['property','property']", "attack.suite"),
        ("attack.suite=['No Such']", "attack.suite"),  # unknown names: leakbed.registry, before the run
        ("workers.addresses=['no-port']", "workers.addresses"),
        ("adversary.users=['u1','u1']", "adversary.users"),
    ],
)
def test_bad_values_name_the_field_in_one_line(override, field):
    with pytest.raises(ConfigError) as err:
        build_config({}, [override])
    msg = str(err.value)
    assert msg.startswith(field) and "\n" not in msg


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("fl.rouns=3", "fl.rouns: Extra inputs are not permitted; did you mean 'rounds'? (got 3)"),
        ("data.synthetic.user=4", "data.synthetic.user: Extra inputs are not permitted; did you mean 'users'? (got 4)"),
        ("workers.limits.memry=1", "workers.limits.memry: Extra inputs are not permitted; did you mean 'memory'? (got 1)"),
        ("seeed=1", "seeed: Extra inputs are not permitted; did you mean 'seed'? (got 1)"),
        ("rounds=3", "rounds: Extra inputs are not permitted; did you mean 'fl.rounds'? (got 3)"),  # a section too high
    ],
)
def test_an_unknown_key_gets_the_closest_key_of_its_section(override, message):
    with pytest.raises(ConfigError) as err:
        build_config({}, [override])
    assert str(err.value) == message


def test_an_unknown_key_nothing_is_close_to_lists_its_sections_keys():
    from leakbed.core.config import FLConfig

    with pytest.raises(ConfigError) as err:
        build_config({}, ["fl.zzzzzz=1"])
    assert str(err.value) == (
        f"fl.zzzzzz: Extra inputs are not permitted (valid: {', '.join(sorted(FLConfig.model_fields))}) (got 1)"
    )


def test_an_old_key_loads_under_its_new_name_with_a_one_line_notice():
    """Run settings moved from [attack] to [workers] (and attack.attackers is attack.suite): an old config still loads,
    each moved key a ``ConfigKeyMoved`` warning naming both; a key given under both names is refused."""
    with pytest.warns(ConfigKeyMoved, match=r"^attack.attackers is now attack.suite: read as such$"):
        assert build_config({}, ["attack.attackers=['mlp','svm']"]).attack.suite == ["mlp", "svm"]
    with pytest.warns(ConfigKeyMoved, match=r"^attack.workers is now workers.count"):
        assert build_config({}, ["attack.workers=3"]).workers.count == 3
    with pytest.warns(ConfigKeyMoved, match=r"^attack.worker_addresses is now workers.addresses"):
        assert build_config({}, ["attack.worker_addresses=['host:5000']"]).workers.addresses == ["host:5000"]
    with pytest.raises(ConfigError, match="attack.workers and workers.count both given: keep workers.count"):
        build_config({}, ["attack.workers=3", "workers.count=2"])


def test_non_synthetic_source_needs_a_path():
    with pytest.raises(ConfigError, match="data.path is required"):
        build_config({}, ["data.source='leaf'"])


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[fl\nrounds = 2")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["fl.rounds"])


@pytest.mark.long
def test_cli_rejects_bad_input_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[attack]\nsuite = ['mlp', 'oracle']\n")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "leakbed.cli", "run", str(bad), "--out", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "attack.suite: unknown attack 'oracle'" in proc.stderr
    assert not out.exists()


def test_cli_refuses_to_overwrite_a_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.md").write_text("earlier results")
    proc = subprocess.run([sys.executable, "-m", "leakbed.cli", "run", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    assert (out / "report.md").read_text() == "earlier results"


@pytest.mark.long
def test_cli_rejects_missing_dataset(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "leakbed.cli", "validate", "--set", "data.source='leaf'", "--set", f"data.path='{tmp_path}/nope'"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("leakbed: error:") and proc.stderr.count("\n") == 1


def test_run_config_overrides_split_outside_brackets_and_quotes():
    text = """fl.rounds=2 split.priors=["random", 'chrono'] name='two words'"""
    assert split_overrides(text) == ["fl.rounds=2", """split.priors=["random", 'chrono']""", "name='two words'"]
    cfg = build_config({}, split_overrides(text))
    assert cfg.split.priors == ["random", "chrono"] and cfg.name == "two words"
