"""How the referee scores each suite attack: one scorer per attack, joining the attack's outputs
in the store with the ground truth only the referee holds.

A scorer returns a JSON-able dict: scalar metrics at the top level (e.g. ``ap``, ``auc``,
``chance``), optional ``tables`` ({title: {"header": [...], "rows": [[...]]}}) and ``figures``
(paths relative to the prior's run folder) for the report. Add one entry per attack.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from leakbed.config import ExperimentConfig
from leakbed.store import UpdateStore
from server.referee import Referee

Scorer = Callable[[Referee, UpdateStore, ExperimentConfig, Path], dict]

SCORERS: dict[str, Scorer] = {}


def score_suite(referee: Referee, store: UpdateStore, cfg: ExperimentConfig, out: Path, names: list[str]) -> dict[str, dict]:
    return {name: SCORERS[name](referee, store, cfg, out) for name in names}
