"""What an attack's referee-side scorer gets (``Attack.scorer``): the attack's outputs and the truth to join them with.

A scorer is a function ``score(ctx: ScoreContext) -> dict``, named by its attack as ``"module:function"`` and
imported by the referee only (never on the attack side). It returns a JSON-able dict: scalar metrics at the top
level (``ap``, ``auc``, ``chance``...), optional ``tables`` ({title: {"header": [...], "rows": [[...]]}}),
``figures`` (paths relative to the prior's results folder), ``notes`` (lines for the report) and ``exports``
({name: metrics} shown as further attacks on the dashboards).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from core.config import ExperimentConfig
from core.data import Federation, federation
from core.store import UpdateStore
from referee.truth import Referee


@dataclass
class ScoreContext:
    """One attack's outputs (under ``name``: the attack's name, or a study's variant), its parameters, the sealed
    truth of the run's prior, the store the attack side wrote, the frozen experiment and where figures go."""

    attack: str  # the attack's plugin name
    name: str  # what its outputs are filed under
    params: Any
    truth: Referee
    store: UpdateStore
    cfg: ExperimentConfig
    rule: str
    out: Path
    groups: dict[str, set[str]] | None = None  # users by group (defending / not defending), for per-group metrics
    extra: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def outputs(self) -> dict[str, np.ndarray]:
        """What the attack's ``predict`` returned."""
        return self.store.read_result(self.name)

    @property
    def seed(self) -> int:
        """The experiment seed: for the referee's own draws (test pairs, non-members), never given to an attack."""
        return self.cfg.seed

    @cached_property
    def federation(self) -> Federation:
        """The run's federation, rebuilt from the frozen config (the referee may read the devices' data)."""
        return federation(self.cfg, self.rule)
