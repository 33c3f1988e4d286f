"""Scoring functions of seed 001 §6 ("Evaluation Metrics"): mean AP over users, chance AP,
× chance, top-1 and top-5. Pure functions of scores and labels (no truth here): the referee calls them with
the true owners, and a plugin's own scorer may use them in the scoring sandbox.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score


def random_ranking_ap(positives: int, total: int) -> float:
    """Exact expected AP of a uniformly random ranking of ``total`` items with ``positives`` relevant.

    E[AP] = (H_N + (P-1)/(N-1) * (N - H_N)) / N. It tends to the positive fraction P/N only when
    P is large; with a few test updates per user it is several times larger, so it is the honest
    chance level (the seed's "chance AP ≈ 1/U" is this limit for large test sets).
    """
    n, p = total, positives
    h = float(np.sum(1.0 / np.arange(1, n + 1)))
    return (h + ((p - 1) / (n - 1) if n > 1 else 0.0) * (n - h)) / n


def reid_metrics(owners: np.ndarray, classes: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Closed-world re-identification metrics.

    Per user u (a column of ``scores``) AP ranks all test updates by their score for u with
    positives = updates truly from u (sklearn ``average_precision_score``); users with no test
    update are skipped. ``chance_ap`` is the mean over the same users of the expected AP of a
    random ranking (``random_ranking_ap``); ``prevalence`` is the mean positive fraction (≈ 1/U),
    the seed's approximation of it; ``x_chance`` = ap / chance_ap.
    """
    owners = np.asarray(owners)
    if len(owners) == 0:
        return {
            "ap": float("nan"),
            "chance_ap": float("nan"),
            "x_chance": float("nan"),
            "prevalence": float("nan"),
            "top1": float("nan"),
            "top5": float("nan"),
            "n_updates": 0,
            "n_users": 0,
        }
    positives = owners[:, None] == np.asarray(classes)[None, :]
    present = positives.any(axis=0)
    aps = [average_precision_score(positives[:, j], scores[:, j]) for j in np.flatnonzero(present)]
    ap = float(np.mean(aps))
    counts = positives[:, present].sum(axis=0)
    chance = float(np.mean([random_ranking_ap(int(c), len(owners)) for c in counts]))
    prevalence = float((counts / len(owners)).mean())
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.asarray(classes)[order]
    top1 = float(np.mean(ranked[:, 0] == owners))
    top5 = float(np.mean((ranked[:, :5] == owners[:, None]).any(axis=1)))
    return {
        "ap": ap,
        "chance_ap": chance,
        "x_chance": ap / chance,
        "prevalence": prevalence,
        "top1": top1,
        "top5": top5,
        "n_updates": int(len(owners)),
        "n_users": int(present.sum()),
    }
