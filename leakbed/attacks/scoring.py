"""What a plugin's own scorer gets, inside the scoring sandbox: its outputs, its parameters and only the truth fields
it declared (``Scoring.truth``), for the anonymous updates it was given.

A scorer is a function ``score(ctx: ScoreContext) -> dict`` named by its attack's ``Scoring(kind="plugin",
function="module:function", truth=(...))``. It runs in a sandbox of its own (``workers.scoring``): no store, no
network, no other attack's outputs, nothing any attack sandbox can later read. It returns JSON numbers: scalar
metrics at the top level (``accuracy``, ``chance``...), ``notes`` (lines for the report), and nested dicts of
numbers (per round...); the referee checks and bounds them, and the report marks the row as scored by the plugin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic

import numpy as np

from leakbed.core.params import P


@dataclass(frozen=True)
class TruthView:
    """The declared truth fields, by anonymous update id (``user_id`` is the owner, ``round`` its round, any other
    name a fact its device sealed); a field it did not declare is not here."""

    fields: dict[str, dict[str, Any]]

    def field_for(self, ids: np.ndarray | list[str], name: str) -> list[Any]:
        """The sealed value of ``name`` for each id (KeyError for a field the scorer did not declare)."""
        values = self.fields[name]
        return [values.get(str(i)) for i in ids]

    def truth_for(self, ids: np.ndarray | list[str]) -> np.ndarray:
        """Each update's owner (declare ``user_id``)."""
        return np.asarray(self.field_for(ids, "user_id"))


@dataclass
class ScoreContext(Generic[P]):
    """One attack's outputs (under ``name``), its parameters (its own model, validated: ``ScoreContext[MyParams]``),
    the truth fields it declared and the ids of every anonymous update it was given (``given``: score over all of
    them)."""

    attack: str
    name: str
    params: P
    outputs: dict[str, np.ndarray]
    truth: TruthView
    given: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)
