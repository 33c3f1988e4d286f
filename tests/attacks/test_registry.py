"""Attacks are found through the entry-point group ``leakbed.attacks``; a broken or ill-declared plugin is one line.
What trusted code knows of one is its declaration (``registry.declare``, data): its params are checked against the
declared fields, in leakbed's params language (``core.declaration.check_params``), and the run against its declared
needs (``core.declaration.unmet``), without importing it."""

from __future__ import annotations

import re
import sys
import types
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from pydantic import Field, ValidationError, field_validator

from leakbed.attacks import registry
from leakbed.attacks.contract import Attack, Needs, Params, Setting
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.declaration import Declaration, ParamsError, Scoring, check_params, needs_of, reid_names, unmet
from leakbed.core.param_schema import ParamField


class GoodParams(Params):
    rounds: int = Field(3, ge=1, le=10, description="rounds [count]")


class Good(Attack):
    name = "good"
    params = GoodParams
    scorer = "tests.attacks.test_registry:score"


class Misnamed(Good):
    name = "other"


class StrictParams(GoodParams):
    @field_validator("rounds")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError("rounds must be odd")
        return v


class Strict(Good):
    name = "strict"
    params = StrictParams


class NoScorer(Good):
    name = "noscorer"
    scorer = ""


def _publish(monkeypatch: pytest.MonkeyPatch, **targets: str) -> None:
    """Replace the installed ``leakbed.attacks`` entry points with ``name=module:attr`` ones."""
    module = types.ModuleType("fake_attacks")
    module.Good, module.Misnamed, module.NoScorer, module.NotAnAttack = Good, Misnamed, NoScorer, object
    module.Strict = Strict
    monkeypatch.setitem(sys.modules, "fake_attacks", module)
    eps = [EntryPoint(name, value, registry.GROUP) for name, value in targets.items()]
    monkeypatch.setattr("leakbed.core.entry_points.entry_points", lambda group: [e for e in eps if e.group == group])
    registry.attack.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_cache():
    registry.attack.cache_clear()
    yield
    registry.attack.cache_clear()


def test_every_built_in_attack_is_published_loads_and_declares_itself():
    names = registry.names()
    assert {"mlp", "svm", "knn", "matching", "open-world", "property", "dlg", "redteam"} <= set(names)
    assert all(registry.attack(n).name == n for n in names)
    decls = {n: registry.declare(n) for n in names}
    assert all(isinstance(d, Declaration) and d.name == n for n, d in decls.items())
    assert reid_names(decls, names) == ["knn", "mlp", "svm"]
    # what the attack side's classes say, as data: leakbed's own scorer kinds, families, the outputs they read
    assert decls["mlp"].scoring == Scoring(kind="reid") and decls["svm"].score_kind == "margin"
    assert decls["metadata"].builds_on == ("family:reid",) and decls["linkage"].on_round and not decls["mlp"].on_round
    assert decls["metadata"].upstream(["mlp", "metadata", "svm", "matching"], decls) == ["mlp", "svm"]
    assert decls["profile"].validates and decls["aggregate-property"].needs.level == "aggregate"
    assert decls["mlp"].params_defaults == registry.params_of("mlp", None).model_dump(mode="json")
    assert decls["knn"].distribution == "leakbed"  # the installed distribution that published it


def test_a_published_attack_is_found_by_name_and_its_params_validated(monkeypatch):
    _publish(monkeypatch, good="fake_attacks:Good")
    assert registry.attack("good") is Good and registry.params_of("good", None) == GoodParams()
    assert registry.params_of("good", {"rounds": 5}).rounds == 5
    with pytest.raises(ValueError, match="rounds"):
        registry.params_of("good", {"rounds": 50})


@pytest.mark.parametrize(
    ("targets", "name", "match"),
    [
        ({"good": "fake_attacks:Good"}, "nope", "unknown attack 'nope'; known: good"),
        ({"bad": "fake_attacks:Misnamed"}, "bad", "declares name 'other'"),
        ({"bad": "fake_attacks:NotAnAttack"}, "bad", "not a subclass of leakbed.plugin.Attack"),
        ({"noscorer": "fake_attacks:NoScorer"}, "noscorer", "scorer must name"),
        ({"gone": "no_such_module_anywhere:Thing"}, "gone", "failed to load: ModuleNotFoundError"),
    ],
)
def test_an_ill_declared_plugin_is_one_line(monkeypatch, targets, name, match):
    _publish(monkeypatch, **targets)
    with pytest.raises(registry.PluginError, match=match) as err:
        registry.attack(name)
    assert "\n" not in str(err.value)


def test_a_name_published_twice_is_refused(monkeypatch):
    module = types.ModuleType("fake_attacks")
    module.Good = Good
    monkeypatch.setitem(sys.modules, "fake_attacks", module)
    eps = [EntryPoint("good", "fake_attacks:Good", registry.GROUP), EntryPoint("good", "elsewhere:Good", registry.GROUP)]
    monkeypatch.setattr("leakbed.core.entry_points.entry_points", lambda group: eps)
    with pytest.raises(registry.PluginError, match="published twice"):
        registry.attack("good")


def test_a_plugin_declares_itself_as_data(monkeypatch):
    _publish(monkeypatch, good="fake_attacks:Good", strict="fake_attacks:Strict")
    good = registry.declare("good")
    # the old "module:function" scorer: its own, in the scoring sandbox, given who sent each update and when
    assert good.scoring == Scoring(kind="plugin", function="tests.attacks.test_registry:score", truth=("user_id", "round"))
    assert good.params_defaults == {"rounds": 3} and good.params.field("rounds") == ParamField(
        name="rounds", type="int", default=3, ge=1, le=10, description="rounds", unit="count"
    )  # leakbed's params language, not the model's JSON schema
    assert not good.validates and not good.check_hook and good.family == "other" and good.needs == Needs() and not good.on_round
    strict = registry.declare("strict")
    assert strict.validates and not strict.check_hook  # its own validator runs in a sandbox before the run starts


def test_params_are_checked_against_the_declared_schema_in_one_line(monkeypatch):
    _publish(monkeypatch, good="fake_attacks:Good")
    decl = registry.declare("good")
    assert check_params(decl, None, "attack.params.good") == {"rounds": 3}
    assert check_params(decl, {"rounds": 7}, "attack.params.good") == {"rounds": 7}
    with pytest.raises(ParamsError, match=r"^attack.params.good.rounds: 50 is greater than the maximum of 10$"):
        check_params(decl, {"rounds": 50}, "attack.params.good")
    with pytest.raises(ParamsError, match=r"attack.params.good.round: unknown parameter of 'good'; did you mean 'rounds'"):
        check_params(decl, {"round": 5}, "attack.params.good")


def test_needs_is_a_frozen_model_that_refuses_unknown_needs():
    needs = Needs(records=True)
    assert needs.records and needs.level == "update" and Needs.model_validate(needs.model_dump()) == needs
    with pytest.raises(ValidationError):
        Needs(gpu=True)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        needs.records = False  # type: ignore[misc]


def _setting(
    task: str = "multiclass", shape: tuple = (1, 4, 4), optimizer: str = "sgd", prop: list | None = None, secagg: bool = False
) -> Setting:
    attrs = {"property": np.asarray(prop)} if prop is not None else {}
    n = len(prop or [0])
    prior = {"u": UserData(np.zeros((n, *shape)), np.zeros(n, np.int64), np.zeros(n), attrs)}
    corpus = Corpus("c", task, 3, shape, {})
    return Setting("data.source 'x' (c)", corpus, prior, "cnn", ("fc.weight",), optimizer, 0.0, 0, secagg)


def _declared(needs: Needs) -> Declaration:
    return Declaration(name="needy", needs=needs, scoring=Scoring(kind="reid"))


@pytest.mark.parametrize(
    ("needs", "setting", "match"),
    [
        (Needs(modality="text"), _setting(), "needs text data; data.source 'x' \\(c\\) is image"),
        (Needs(tasks=frozenset({"multilabel"})), _setting(), "needs a multilabel task"),
        (Needs(models=frozenset({"resnet18"})), _setting(), "needs model.name resnet18"),
        (Needs(plain_sgd=True), _setting(optimizer="adam"), "fl.optimizer = 'sgd'"),
        (Needs(property_column=True), _setting(), "per-example 'property' column"),
        (Needs(property_column=True), _setting(prop=[1, 1]), "only with"),
        (Needs(), _setting(secagg=True), "'needy' needs individual updates, but fl.secure_aggregation = 'secagg\\+'"),
    ],
)
def test_unmet_needs_are_one_line_before_anything_starts(needs, setting, match):
    why = unmet(_declared(needs), setting)
    assert why is not None and why.startswith("attack.suite: 'needy' ") and re.search(match, why) and "\n" not in why, why


def test_a_setting_that_meets_the_needs_passes():
    prop = registry.declare("property")
    assert unmet(prop, _setting(prop=[0, 1])) is None
    assert registry.attack("property").check(registry.params_of("property", None), _setting(prop=[0, 1])) is None
    # under SecAgg+ only an attack that reads aggregates runs; an update-level one is refused
    assert unmet(registry.declare("aggregate-property"), _setting(prop=[0, 1], secagg=True)) is None
    assert "needs individual updates" in (unmet(prop, _setting(prop=[0, 1], secagg=True)) or "")


def test_needs_of_a_suite():
    decls = {n: registry.declare(n) for n in ("mlp", "svm", "membership", "linkage")}
    assert needs_of(decls, ["mlp", "membership"], "records") and not needs_of(decls, ["mlp", "svm"], "records")
    assert needs_of(decls, ["linkage"], "participation") and needs_of(decls, ["membership"], "full_updates")
