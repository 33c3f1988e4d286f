"""Each attack's scorer, found from its plugin: ``Attack.scorer`` names it as ``"module:function"``.

The referee imports a scorer only here, after the attack side has written its outputs; the attack side never
imports one. A scorer that fails to load or to score is one line in the run's metrics, not a lost run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from attacks import registry
from referee.context import ScoreContext

Scorer = Callable[[ScoreContext], dict]


class ScorerError(RuntimeError):
    """An attack's scorer could not be loaded (one line)."""


def scorer_of(name: str) -> Scorer:
    """Attack ``name``'s scorer function."""
    path = registry.attack(name).scorer
    module, _, function = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as err:
        raise ScorerError(f"attack {name!r}: scorer {path!r} cannot be loaded: {err}") from None
    if not callable(found):
        raise ScorerError(f"attack {name!r}: scorer {path!r} is not a function")
    return found


def params_for(name: str, table: dict[str, Any] | None, overrides: dict[str, Any] | None = None) -> Any:
    """The attack's parameters as its run (or a study's variant) fitted it."""
    return registry.params_of(name, {**(table or {}), **(overrides or {})})


def score_one(attack: str, ctx: ScoreContext) -> dict:
    """Attack ``attack``'s metrics on the outputs ``ctx`` names."""
    return scorer_of(attack)(ctx)
