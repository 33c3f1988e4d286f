"""An attack scored by its own scorer, which says when it ran and what it could see: the truth it is handed must
never be there while a lane of its prior can run."""

from __future__ import annotations

import os
import time
from typing import ClassVar

import numpy as np

from leakbed.plugin import Attack, AttackContext, NoParams, Outputs, ScoreContext, Scoring
from leakbed_hostile_sandbox.common import ranking


def score(ctx: ScoreContext) -> dict:
    started = time.time()
    ids = np.asarray(ctx.given, dtype=str)
    owners = ctx.truth.truth_for(ids)
    out = ctx.outputs
    row = {str(i): k for k, i in enumerate(out["ids"])}
    classes = np.asarray(out["classes"], dtype=str)
    named = [classes[int(np.argmax(out["scores"][row[i]]))] if i in row else "" for i in ids]
    top1 = float(np.mean([n == o for n, o in zip(named, owners, strict=True)])) if len(ids) else 0.0
    processes = len([p for p in os.listdir("/proc") if p.isdigit()])
    return {"top1": top1, "started": started, "uid": os.getuid(), "processes": processes}


class HostileScored(Attack):
    """A random ranking, scored by its own scorer (``score``), handed ``user_id``."""

    name: ClassVar[str] = "hostile-scored"
    family = "other"  # plugin-scored numbers stay out of the re-identification table
    params = NoParams
    scorer = Scoring(kind="plugin", function="leakbed_hostile_sandbox.scored:score", truth=("user_id",))
    source = "leakbed's red team (tests/redteam/hostile_sandbox): a plugin scorer that reports when it ran"

    def fit(self, ctx: AttackContext) -> None:
        pass

    def predict(self, ctx: AttackContext) -> Outputs:
        return ranking(ctx, self.name)
