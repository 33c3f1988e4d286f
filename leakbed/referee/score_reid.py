"""Referee side of closed-world re-identification (seed 001 §6.1.1, Table 3): kind ``reid``, the scorer of every
attack of the ``reid`` family (mlp, svm, knn, and a plugin's own). Overall, per round, and per group of users (each
group ranked among its own updates only).

Coverage: one row per given update (``scores`` (n, k) over ``classes``); a given update without a row, or with a
non-finite score in a class the referee holds, gets i.i.d. uniform scores over the classes drawn by the referee (over
the range of the attack's own finite scores), so it ranks anywhere in each user's column, and its top-k counts at
chance (k / |users|); metrics are over every given update. Rounds are the store's.

Classes: the users the referee holds for the prior (``ScoreContext.known_users``), never the attack's ``classes``
(an attack that returned only its most confident user was once averaged over that user alone: 75 AP became 100).
AP is the mean over every held user with a given update; a user the attack left out counts its exact chance AP and
sits at a random place in every row's ranking (``core.reid_metrics``); a class it names that the referee does not
hold, or names twice, is ignored. ``classes_missing`` / ``classes_extra`` / ``classes_duplicate`` report them.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import ClassCoverage, Coverage


def score(ctx: ScoreContext) -> dict:
    pred = ctx.outputs
    held = ClassCoverage(ctx.known_users, pred["classes"])
    kept = held.kept(pred["scores"])
    cov = Coverage.of(ctx, "reid", pred["ids"], kept)
    scores = held.widen(cov.scores(kept))
    owners = ctx.truth.truth_for(cov.given)
    rounds = cov.rounds(pred.get("rounds"))
    classes, filled = held.classes, cov.filled
    by_group = {}
    for name, users in (ctx.groups or {}).items():
        sel = np.isin(owners, list(users))
        by_group[name] = reid_metrics(owners[sel], classes, scores[sel], filled[sel])
    per_round = {}
    for rnd in np.unique(rounds):
        sel = rounds == rnd
        per_round[int(rnd)] = reid_metrics(owners[sel], classes, scores[sel], filled[sel])
    return {
        **reid_metrics(owners, classes, scores, filled),
        **cov.report(),
        **held.report(),
        "per_round": per_round,
        "groups": by_group,
        "notes": [cov.note(), *held.notes()],
    }
