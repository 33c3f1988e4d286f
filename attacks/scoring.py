"""Scoring functions of seed 001 §6 ("Evaluation Metrics"): mean AP over users, chance AP,
× chance, top-1 and top-5. Pure functions of scores and labels; only the referee calls them
with the true owners.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score


def reid_metrics(owners: np.ndarray, classes: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Closed-world re-identification metrics.

    Per user u (a column of ``scores``) AP ranks all test updates by their score for u with
    positives = updates truly from u (sklearn ``average_precision_score``); users with no test
    update are skipped. Chance AP is the mean positive fraction over the same users (≈ 1/U).
    """
    owners = np.asarray(owners)
    if len(owners) == 0:
        return {"ap": float("nan"), "chance_ap": float("nan"), "x_chance": float("nan"), "top1": float("nan"), "top5": float("nan"), "n_updates": 0, "n_users": 0}
    positives = owners[:, None] == np.asarray(classes)[None, :]
    present = positives.any(axis=0)
    aps = [average_precision_score(positives[:, j], scores[:, j]) for j in np.flatnonzero(present)]
    ap = float(np.mean(aps))
    chance = float(positives[:, present].mean(axis=0).mean())
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.asarray(classes)[order]
    top1 = float(np.mean(ranked[:, 0] == owners))
    top5 = float(np.mean((ranked[:, :5] == owners[:, None]).any(axis=1)))
    return {"ap": ap, "chance_ap": chance, "x_chance": ap / chance, "top1": top1, "top5": top5, "n_updates": int(len(owners)), "n_users": int(present.sum())}
