"""Attacks are found through the entry-point group ``leakbed.attacks``; a broken or ill-declared plugin is one line."""

from __future__ import annotations

import re
import sys
import types
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from pydantic import Field

from attacks import registry
from attacks.contract import Attack, Needs, Params, Setting
from core.data.corpus import Corpus, UserData


class GoodParams(Params):
    rounds: int = Field(3, ge=1, le=10, description="rounds [count]")


class Good(Attack):
    name = "good"
    params = GoodParams
    scorer = "tests.attacks.test_registry:score"


class Misnamed(Good):
    name = "other"


class NoScorer(Good):
    name = "noscorer"
    scorer = ""


def _publish(monkeypatch: pytest.MonkeyPatch, **targets: str) -> None:
    """Replace the installed ``leakbed.attacks`` entry points with ``name=module:attr`` ones."""
    module = types.ModuleType("fake_attacks")
    module.Good, module.Misnamed, module.NoScorer, module.NotAnAttack = Good, Misnamed, NoScorer, object
    monkeypatch.setitem(sys.modules, "fake_attacks", module)
    eps = [EntryPoint(name, value, registry.GROUP) for name, value in targets.items()]
    monkeypatch.setattr("core.entry_points.entry_points", lambda group: [e for e in eps if e.group == group])
    registry.attack.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_cache():
    registry.attack.cache_clear()
    yield
    registry.attack.cache_clear()


def test_every_built_in_attack_is_published_and_loads():
    names = registry.names()
    assert {"mlp", "svm", "knn", "matching", "open-world", "property", "dlg", "redteam"} <= set(names)
    assert all(registry.attack(n).name == n for n in names)
    assert registry.reid_names(names) == ["knn", "mlp", "svm"]


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
    monkeypatch.setattr("core.entry_points.entry_points", lambda group: eps)
    with pytest.raises(registry.PluginError, match="published twice"):
        registry.attack("good")


def _setting(task: str = "multiclass", shape: tuple = (1, 4, 4), optimizer: str = "sgd", prop: list | None = None) -> Setting:
    attrs = {"property": np.asarray(prop)} if prop is not None else {}
    n = len(prop or [0])
    prior = {"u": UserData(np.zeros((n, *shape)), np.zeros(n, np.int64), np.zeros(n), attrs)}
    corpus = Corpus("c", task, 3, shape, {})
    return Setting("data.source 'x' (c)", corpus, prior, "cnn", ("fc.weight",), optimizer, 0.0, 0, False)


@pytest.mark.parametrize(
    ("needs", "setting", "match"),
    [
        (Needs(modality="text"), _setting(), "needs text data; data.source 'x' \\(c\\) is image"),
        (Needs(tasks=frozenset({"multilabel"})), _setting(), "needs a multilabel task"),
        (Needs(models=frozenset({"resnet18"})), _setting(), "needs model.name resnet18"),
        (Needs(plain_sgd=True), _setting(optimizer="adam"), "fl.optimizer = 'sgd'"),
        (Needs(property_column=True), _setting(), "per-example 'property' column"),
        (Needs(property_column=True), _setting(prop=[1, 1]), "only with"),
    ],
)
def test_unmet_needs_are_one_line_before_anything_starts(monkeypatch, needs, setting, match):
    cls = type("Needy", (Good,), {"name": "needy", "needs": needs})
    module = types.ModuleType("needy_attack")
    module.Needy = cls
    monkeypatch.setitem(sys.modules, "needy_attack", module)
    needy = EntryPoint("needy", "needy_attack:Needy", registry.GROUP)
    monkeypatch.setattr("core.entry_points.entry_points", lambda group: [needy])
    why = registry.unmet("needy", GoodParams(), setting)
    assert why is not None and re.search(match, why) and "\n" not in why, why


def test_a_setting_that_meets_the_needs_passes():
    assert registry.unmet("property", registry.params_of("property", None), _setting(prop=[0, 1])) is None


def test_needs_of_a_suite():
    assert registry.needs_of(["mlp", "membership"], "records") and not registry.needs_of(["mlp", "svm"], "records")
    assert registry.needs_of(["linkage"], "participation") and registry.needs_of(["membership"], "full_updates")
