"""Defenses are found through the entry-point group ``leakbed.defenses``; each validates its own parameters."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest
from pydantic import Field

from leakbed.core.config import DefenseConfig
from leakbed.defenses import registry
from leakbed.defenses.contract import Defense, Params


class ShadowingParams(Params):
    fraction: float = Field(0.5, ge=0.0, le=1.0, description="clashes with the entry's own key [fraction]")


class Shadowing(Defense):
    name = "shadowing"
    params = ShadowingParams


@pytest.fixture(autouse=True)
def _fresh_cache():
    registry.defense.cache_clear()
    yield
    registry.defense.cache_clear()


def _publish(monkeypatch: pytest.MonkeyPatch, **targets: str) -> None:
    module = types.ModuleType("fake_defenses")
    module.Shadowing, module.NotADefense = Shadowing, object
    monkeypatch.setitem(sys.modules, "fake_defenses", module)
    eps = [EntryPoint(name, value, registry.GROUP) for name, value in targets.items()]
    monkeypatch.setattr("leakbed.core.entry_points.entry_points", lambda group: [e for e in eps if e.group == group])


def test_every_built_in_defense_is_published_with_its_own_parameters():
    names = registry.names()
    assert {"bkg-repl", "rand-aug", "mm-aug", "noise", "selective", "dp-fedavg", "local-dp", "vocab", "dropout"} <= set(names)
    noise = registry.params_of(DefenseConfig(name="noise", variance=0.1))
    assert noise.variance == 0.1 and registry.params_of(DefenseConfig(name="mm-aug")).clusters == 8
    with pytest.raises(ValueError, match="variance"):
        registry.params_of(DefenseConfig(name="noise", variance=-1))
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        registry.params_of(DefenseConfig(name="noise", strength=0.1))  # the old flat field: each defense names its own


@pytest.mark.parametrize(
    ("targets", "name", "match"),
    [
        ({}, "nope", "unknown defense 'nope'"),
        ({"bad": "fake_defenses:NotADefense"}, "bad", "not a subclass of leakbed.plugin.Defense"),
        ({"other": "fake_defenses:Shadowing"}, "other", "declares name 'shadowing'"),
        ({"shadowing": "fake_defenses:Shadowing"}, "shadowing", "parameter 'fraction' would shadow"),
        ({"gone": "no_such_module_anywhere:Thing"}, "gone", "failed to load"),
    ],
)
def test_an_ill_declared_defense_is_one_line(monkeypatch, targets, name, match):
    _publish(monkeypatch, **targets)
    with pytest.raises(registry.PluginError, match=match) as err:
        registry.defense(name)
    assert "\n" not in str(err.value)


def test_an_unknown_defense_gets_the_closest_published_name():
    with pytest.raises(registry.PluginError) as err:
        registry.defense("nosie")
    known = ", ".join(registry.names())
    assert str(err.value) == f"unknown defense 'nosie'; did you mean 'noise'? (known: {known})"
    with pytest.raises(registry.PluginError) as err:
        registry.defense("zzzz")
    assert str(err.value) == f"unknown defense 'zzzz' (known: {known})"


def test_an_unknown_defense_parameter_gets_the_closest_and_the_valid_names():
    """The run's preflight words a defense's parameter it does not take as the attack params' check does."""
    from leakbed.core.config import ConfigError, build_config
    from leakbed.preflight import resolve

    base = ["attack.suite=['knn']"]
    with pytest.raises(ConfigError) as err:
        resolve(build_config({}, [*base, 'defenses=[{name="noise", varianc=0.1}]']))
    assert str(err.value) == (
        "defenses.0 (noise).varianc: Extra inputs are not permitted; did you mean 'variance'? (valid: variance) (got 0.1)"
    )
    with pytest.raises(ConfigError) as err:
        resolve(build_config({}, [*base, 'defenses=[{name="mm-aug", strength=1}]']))
    valid = ", ".join(sorted(registry.defense("mm-aug").params.model_fields))
    assert str(err.value) == f"defenses.0 (mm-aug).strength: Extra inputs are not permitted (valid: {valid}) (got 1)"
    with pytest.raises(ConfigError, match=r"^defenses.0: unknown defense 'nosie'; did you mean 'noise'\? \(known: "):
        resolve(build_config({}, [*base, 'defenses=[{name="nosie"}]']))
