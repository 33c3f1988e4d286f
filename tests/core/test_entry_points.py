"""Plugins by name (``core.entry_points``): a name selects the one distribution publishing it, ``distribution:name``
selects one of several; a name two distributions publish is refused only when it is selected bare, naming both."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

from leakbed.core import entry_points
from leakbed.core.entry_points import PluginError, candidates, load, select, split
from leakbed.defenses import registry as defenses

GROUP = "leakbed.tests"


class _Dist:
    """What ``EntryPoint.dist`` offers here: a name in its metadata."""

    def __init__(self, name: str) -> None:
        self.metadata = {"Name": name}


def _publish(monkeypatch: pytest.MonkeyPatch, *eps: tuple[str, str, str]) -> None:
    made = []
    for dist, name, value in eps:
        ep = EntryPoint(name, value, GROUP)
        vars(ep).update(dist=_Dist(dist))  # as importlib.metadata attaches an entry point's distribution
        made.append(ep)
    real = entry_points.entry_points
    monkeypatch.setattr(entry_points, "entry_points", lambda group: made if group == GROUP else real(group=group))


def test_a_name_and_a_distribution_name_select_it(monkeypatch):
    module = types.ModuleType("lb_fake_eps")
    module.one, module.two = object(), object()
    monkeypatch.setitem(sys.modules, "lb_fake_eps", module)
    _publish(monkeypatch, ("Pkg_One", "alpha", "lb_fake_eps:one"), ("pkg-two", "beta", "lb_fake_eps:two"),
             ("pkg-two", "alpha", "lb_fake_eps:two"))  # fmt: skip
    assert split("pkg-two:alpha") == ("pkg-two", "alpha") and split("alpha") == ("", "alpha")
    assert split("Pkg_One:alpha") == ("pkg-one", "alpha")  # normalized as pip does
    assert load(GROUP, "beta", "thing") is module.two
    assert load(GROUP, "pkg-one:alpha", "thing") is module.one and load(GROUP, "pkg-two:alpha", "thing") is module.two
    assert [ep.value for ep in candidates(GROUP, "alpha")] == ["lb_fake_eps:one", "lb_fake_eps:two"]
    with pytest.raises(PluginError) as err:
        select(GROUP, "alpha", "thing")
    assert str(err.value) == ("thing 'alpha' is published twice: by pkg-one (lb_fake_eps:one), pkg-two (lb_fake_eps:two); "
                              "select one as 'pkg-one:alpha' or 'pkg-two:alpha'")
    with pytest.raises(PluginError, match=r"^unknown thing 'beta' by distribution 'pkg-one'; known: alpha, beta$"):
        select(GROUP, "pkg-one:beta", "thing")


def test_a_defense_is_selected_by_distribution_name():
    assert type(defenses.defense("leakbed:noise")) is type(defenses.defense("noise"))
    with pytest.raises(PluginError, match="unknown defense 'nope:noise'"):
        defenses.defense("nope:noise")
