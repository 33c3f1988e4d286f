"""The one module a plugin imports: leakbed's plugin contract.

A plugin is a Python package of its own that publishes its classes under two entry-point groups in its
``pyproject.toml``; leakbed finds built-in and third-party plugins the same way, by name::

    [project.entry-points."leakbed.attacks"]
    my-attack = "my_package.attack:MyAttack"

    [project.entry-points."leakbed.defenses"]
    my-defense = "my_package.defense:MyDefense"

A run then names them: ``attack.suite = ["my-attack"]`` with ``[attack.params.my-attack]``, and
``defenses = [{name = "my-defense", ...its params}]``. Nothing of leakbed changes.

An attack's code runs only in sandboxes: its own lane per prior (``on_round``, ``fit``, ``predict``), the
introspection that reads its declaration, the check of its parameters, and its own scorer if it has one. What each
side may use (``docs/reference/plugin-api.md`` documents every name):

* attack side: ``Attack``, ``ReidAttack``, ``Needs``, ``Setting``, ``AttackContext`` (``store``: an ``InputsView``,
  read-only; ``folder``: its own), ``AttackerKnowledge``, ``Outputs``, ``Scores``, ``RoundSnapshot``, ``Corpus``,
  ``UserData``, ``Scoring``; for attacks that work on the model itself, ``build_model``, ``load_arrays``,
  ``pick_device`` and seed 004's ``feature_split``, ``train_property_net``, ``predict_property``;
* a plugin's own scorer (``Scoring(kind="plugin", ...)``, run in the scoring sandbox): ``ScoreContext``,
  ``TruthView``, ``reid_metrics``, ``random_ranking_ap``;
* defenses (device code): ``Defense``, ``DeviceContext``, ``DefenseSetting``, ``ServerContext``, ``reply_mod``;
* both: ``Params`` and ``NoParams``, the base of a plugin's parameter model, and ``ATTACKS`` / ``DEFENSES``, the
  entry-point group names.

The attack side and the scorer side are imported here; the names that pull in torch or Flower (the model helpers,
the defense contract) load on first use, so a lane that needs neither does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from leakbed.attacks.contract import Attack, AttackContext, Outputs, ReidAttack, Scores
from leakbed.attacks.scoring import ScoreContext, TruthView
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.declaration import Needs, Scoring, Setting
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.params import NoParams, Params
from leakbed.core.records import RoundSnapshot
from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics

if TYPE_CHECKING:  # loaded on first use (torch, Flower): see __getattr__
    pass

ATTACKS = "leakbed.attacks"
DEFENSES = "leakbed.defenses"

_LAZY = {
    "build_model": "leakbed.core.models",
    "load_arrays": "leakbed.core.training",
    "pick_device": "leakbed.core.training",
    "feature_split": "leakbed.core.features",
    "train_property_net": "leakbed.attacks.feature_inference",
    "predict_property": "leakbed.attacks.feature_inference",
    "Defense": "leakbed.defenses.contract",
    "DeviceContext": "leakbed.defenses.contract",
    "DefenseSetting": "leakbed.defenses.contract",
    "ServerContext": "leakbed.defenses.contract",
    "reply_mod": "leakbed.defenses.mod_reply",
}
__all__ = [
    "ATTACKS", "DEFENSES", "Attack", "AttackContext", "AttackerKnowledge", "Corpus", "InputsView", "Needs", "NoParams",
    "Outputs", "Params", "ReidAttack", "RoundSnapshot", "ScoreContext", "Scores", "Scoring", "Setting", "TruthView",
    "UserData", "random_ranking_ap", "reid_metrics", *_LAZY,
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"leakbed.plugin has no {name!r}; a plugin may use: {', '.join(__all__)}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
