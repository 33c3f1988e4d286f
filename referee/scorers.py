"""How the referee scores each suite attack: one scorer per attack, joining the attack's outputs
in the store with the ground truth only the referee holds.

A scorer returns a JSON-able dict: scalar metrics at the top level (e.g. ``ap``, ``auc``,
``chance``), optional ``tables`` ({title: {"header": [...], "rows": [[...]]}}) and ``figures``
(paths relative to the prior's run folder) for the report. Add one entry per attack.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core.config import ExperimentConfig
from core.store import UpdateStore
from referee import (
    score_attributes,
    score_cross_modal,
    score_linkage,
    score_matching,
    score_metadata,
    score_open_world,
    score_profile,
    score_reconstruction,
    score_redteam,
)
from referee.score_membership import score_membership
from referee.score_property import score_aggregate_property, score_property
from referee.truth import Referee

Scorer = Callable[[Referee, UpdateStore, ExperimentConfig, Path], dict]

SCORERS: dict[str, Scorer] = {}
SCORERS["open-world"] = score_open_world.score
SCORERS["matching"] = score_matching.score
SCORERS["cross-modal"] = score_cross_modal.score
SCORERS["profile"] = score_profile.score
SCORERS["attributes"] = score_attributes.score
SCORERS["property"] = score_property
SCORERS["aggregate-property"] = score_aggregate_property
SCORERS["membership"] = score_membership
SCORERS["redteam"] = score_redteam.score
SCORERS["metadata"] = score_metadata.score
SCORERS["linkage"] = score_linkage.score
for _name in ("feature-inference", "dlg", "inverting-gradients"):
    SCORERS[_name] = score_reconstruction.scorer(_name)


def score_suite(referee: Referee, store: UpdateStore, cfg: ExperimentConfig, out: Path, names: list[str]) -> dict[str, dict]:
    return {name: SCORERS[name](referee, store, cfg, out) for name in names}
