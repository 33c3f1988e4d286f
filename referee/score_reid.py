"""Referee side of closed-world re-identification (seed 001 §6.1.1, Table 3): the scorer of every attack of the
``reid`` family (mlp, svm, knn, and a plugin's own). Overall, per round, and per group of users (each group
ranked among its own updates only)."""

from __future__ import annotations

import numpy as np

from referee.context import ScoreContext
from referee.reid_metrics import reid_metrics


def score(ctx: ScoreContext) -> dict:
    pred = ctx.outputs
    owners = ctx.truth.truth_for(pred["ids"])
    classes, scores, rounds = pred["classes"], pred["scores"], pred["rounds"]
    by_group = {}
    for name, users in (ctx.groups or {}).items():
        sel = np.isin(owners, list(users))
        by_group[name] = reid_metrics(owners[sel], classes, scores[sel])
    per_round = {}
    for rnd in np.unique(rounds):
        sel = rounds == rnd
        per_round[int(rnd)] = reid_metrics(owners[sel], classes, scores[sel])
    return {**reid_metrics(owners, classes, scores), "per_round": per_round, "groups": by_group}
