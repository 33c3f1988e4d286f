"""The one module a plugin imports: leakbed's plugin contract, typed and versioned.

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
* both: ``Params`` and ``NoParams``, the base of a plugin's parameter model, ``LeakbedError`` (raise it for input a
  plugin refuses: one line), ``ATTACKS`` / ``DEFENSES``, the entry-point group names, and ``API_VERSION``.

Typed (PEP 561; ``mypy --strict`` passes over this module, the example plugin and ``plugins/``): the contracts are
generic over the plugin's own parameters, ``class MyAttack(Attack[MyParams])``, so ``ctx.params`` is a ``MyParams``
to a type checker; ``params`` is set from the subscript. The attack side and the scorer side are imported here; the
names that pull in torch or Flower (the model helpers, the defense contract) load on first use, so a lane or a
scorer that needs neither does not pay for them (a type checker sees them, typed, through the ``TYPE_CHECKING``
imports below). Importing this module loads numpy and pydantic, never pandas, scipy, scikit-learn, torch, Flower or
Ray (``tests/leakbed/test_plugin_api.py``).

``API_VERSION`` is the version of this contract, (major, minor), apart from the distribution's version: a minor
release adds names or optional hooks, a major one removes or changes them. A name is removed only after it has
warned for at least one minor release (``LeakbedDeprecationWarning`` on first use) and only in a major release
(``docs/explanation/deprecation-policy.md``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Final

from leakbed.attacks.contract import Attack, AttackContext, Outputs, ReidAttack, Scores
from leakbed.attacks.scoring import ScoreContext, TruthView
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.declaration import Needs, Scoring, Setting
from leakbed.core.errors import LeakbedError
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.params import NoParams, Params
from leakbed.core.records import RoundSnapshot
from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics

if TYPE_CHECKING:  # loaded on first use at run time (torch, Flower): see __getattr__ and _LAZY
    from leakbed.attacks.feature_inference import predict_property, train_property_net
    from leakbed.core.features import feature_split
    from leakbed.core.models import build_model
    from leakbed.core.training import load_arrays, pick_device
    from leakbed.defenses.contract import Defense, DefenseSetting, DeviceContext, ServerContext
    from leakbed.defenses.mod_reply import reply_mod

API_VERSION: Final[tuple[int, int]] = (1, 0)
ATTACKS: Final = "leakbed.attacks"
DEFENSES: Final = "leakbed.defenses"


class LeakbedDeprecationWarning(DeprecationWarning):
    """A name of this module that will be removed in the next major ``API_VERSION``; its message names the
    replacement. Turn it into an error in a plugin's own tests: ``-W error::leakbed.plugin.LeakbedDeprecationWarning``."""


# a name -> the module that holds it: imported on first use (the same names are imported above for a type checker)
_LAZY: Final = {
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
# a deprecated name -> (the name that replaces it, the API_VERSION that deprecated it): it keeps working, warning once
# per process, until the next major version removes it (docs/explanation/deprecation-policy.md); none today
_DEPRECATED: Final[dict[str, tuple[str, tuple[int, int]]]] = {}

__all__ = [
    "API_VERSION", "ATTACKS", "DEFENSES", "Attack", "AttackContext", "AttackerKnowledge", "Corpus", "InputsView",
    "LeakbedDeprecationWarning", "LeakbedError", "Needs", "NoParams", "Outputs", "Params", "ReidAttack", "RoundSnapshot",
    "ScoreContext", "Scores", "Scoring", "Setting", "TruthView", "UserData", "random_ranking_ap", "reid_metrics",
    "build_model", "load_arrays", "pick_device", "feature_split", "train_property_net", "predict_property", "Defense",
    "DeviceContext", "DefenseSetting", "ServerContext", "reply_mod",
]  # fmt: skip


if not TYPE_CHECKING:  # a type checker sees the imports above instead, and an unknown name as an error

    def __getattr__(name: str) -> object:
        if name in _DEPRECATED:
            new, since = _DEPRECATED[name]
            warnings.warn(
                f"leakbed.plugin.{name} is deprecated since API {since[0]}.{since[1]} and goes in API "
                f"{API_VERSION[0] + 1}.0: use leakbed.plugin.{new}",
                LeakbedDeprecationWarning,
                stacklevel=2,
            )
            value = getattr(importlib.import_module(__name__), new)
        elif name in _LAZY:
            value = getattr(importlib.import_module(_LAZY[name]), name)
        else:
            raise AttributeError(f"leakbed.plugin has no {name!r}; a plugin may use: {', '.join(__all__)}")
        globals()[name] = value  # once: a deprecated name warns on its first use in a process
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
