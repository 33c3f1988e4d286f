"""Referee side of closed-world re-identification (seed 001 §6.1.1, Table 3): kind ``reid``, the scorer of every
attack of the ``reid`` family (mlp, svm, knn, and a plugin's own). Overall, per round, and per group of users (each
group ranked among its own updates only).

Coverage: one row per given update (``scores`` (n, k) over ``classes``); a given update without a row, or with a
non-finite score, gets i.i.d. uniform scores over the classes drawn by the referee (over the range of the attack's
own finite scores), so its top-k is chance and it ranks anywhere in each user's column; metrics are over every
given update. Rounds are the store's.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage


def score(ctx: ScoreContext) -> dict:
    pred = ctx.outputs
    cov = Coverage.of(ctx, "reid", pred["ids"], pred["scores"])
    scores = cov.scores(pred["scores"])
    owners = ctx.truth.truth_for(cov.given)
    rounds = cov.rounds(pred.get("rounds"))
    classes = pred["classes"]
    by_group = {}
    for name, users in (ctx.groups or {}).items():
        sel = np.isin(owners, list(users))
        by_group[name] = reid_metrics(owners[sel], classes, scores[sel])
    per_round = {}
    for rnd in np.unique(rounds):
        sel = rounds == rnd
        per_round[int(rnd)] = reid_metrics(owners[sel], classes, scores[sel])
    return {
        **reid_metrics(owners, classes, scores),
        **cov.report(),
        "per_round": per_round,
        "groups": by_group,
        "notes": [cov.note()],
    }
