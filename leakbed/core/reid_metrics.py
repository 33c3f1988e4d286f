"""Scoring functions of seed 001 §6 ("Evaluation Metrics"): mean AP over users, chance AP,
× chance, top-1 and top-5. Pure functions of scores and labels (no truth here): the referee calls them with
the true owners, and a plugin's own scorer may use them in the scoring sandbox.

The classes a metric averages over are the caller's (the referee passes every user it holds for the prior), never
the attack's: a column of ``scores`` that is NaN in every row is a class the attack did not score, and it counts at
chance (its AP is the exact expected AP of a random ranking; in every row it sits at a uniformly random place among
the classes, so the rows it owns are hit with probability k / |classes|). Rows the referee drew for a missing update
(``filled``) are hit with probability k / |classes| too. Both are expectations, not draws: an omission costs exactly
chance, with no luck to fish for.
"""

from __future__ import annotations

import numpy as np

TOP = (1, 5)  # the k of top-k accuracy (seed 001 §6)


def random_ranking_ap(positives: int, total: int) -> float:
    """Exact expected AP of a uniformly random ranking of ``total`` items with ``positives`` relevant.

    E[AP] = (H_N + (P-1)/(N-1) * (N - H_N)) / N. It tends to the positive fraction P/N only when
    P is large; with a few test updates per user it is several times larger, so it is the honest
    chance level (the seed's "chance AP ≈ 1/U" is this limit for large test sets).
    """
    n, p = total, positives
    h = float(np.sum(1.0 / np.arange(1, n + 1)))
    return (h + ((p - 1) / (n - 1) if n > 1 else 0.0) * (n - h)) / n


def top_k_hits(owners: np.ndarray, classes: np.ndarray, scores: np.ndarray, k: int, filled: np.ndarray) -> np.ndarray:
    """Per row, the probability that its owner is among the ``k`` best-scored classes.

    A row's scored classes keep their order (ties broken by column order, as a stable sort does); each class scored in
    no row (an all-NaN column) is inserted at a uniformly random place of that order. With ``C`` scored classes of
    ``K``, the kept classes fill a uniform random ``C``-subset of the ``K`` places, so an owner ranked ``ρ`` among them
    lands in the top ``k`` with P(X ≥ ρ), X ~ Hypergeometric(K, k, C) (the kept places among the first k); an owner
    whose class is unscored, or a ``filled`` row, with k / K. An owner outside ``classes`` is never hit."""
    n, n_classes = scores.shape
    out = np.zeros(n)
    if n_classes == 0 or n == 0:
        return out
    k = min(k, n_classes)
    scored = ~np.isnan(scores).all(axis=0)
    kept = np.flatnonzero(scored)
    col: dict[str, int] = {}
    for n_col, c in enumerate(np.asarray(classes).tolist()):
        col.setdefault(str(c), n_col)  # a repeated class is its first column
    j = np.asarray([col.get(str(o), -1) for o in np.asarray(owners).tolist()], np.int64)
    known = j >= 0
    at_chance = known & (np.asarray(filled, bool) | ~scored[np.clip(j, 0, None)])
    ranked = known & ~at_chance
    if ranked.any():
        from scipy.stats import hypergeom  # here, not at import: a plugin importing leakbed.plugin loads no scipy

        where = np.full(n_classes, -1, np.int64)
        where[kept] = np.arange(len(kept))
        order = np.argsort(-scores[np.ix_(ranked, kept)], axis=1, kind="stable")
        rho = 1 + np.argmax(order == where[j[ranked]][:, None], axis=1)  # the owner's place among the scored classes
        p_at = hypergeom.sf(np.arange(len(kept) + 1) - 1, n_classes, k, len(kept))  # P(X ≥ ρ), ρ = 0..C
        out[ranked] = p_at[rho]
    out[at_chance] = k / n_classes
    return np.clip(out, 0.0, 1.0)


def reid_metrics(
    owners: np.ndarray, classes: np.ndarray, scores: np.ndarray, filled: np.ndarray | None = None
) -> dict[str, float]:
    """Closed-world re-identification metrics.

    Per user u (a column of ``scores``) AP ranks all test updates by their score for u with
    positives = updates truly from u (sklearn ``average_precision_score``); users with no test
    update are skipped; a column NaN in every row (a user the attack did not score) counts its
    exact chance AP. ``chance_ap`` is the mean over the same users of the expected AP of a
    random ranking (``random_ranking_ap``); ``prevalence`` is the mean positive fraction (≈ 1/U),
    the seed's approximation of it; ``x_chance`` = ap / chance_ap. Top-k as ``top_k_hits``.
    """
    owners = np.asarray(owners)
    classes = np.asarray(classes)
    scores = np.asarray(scores, np.float64).reshape(len(owners), len(classes))
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
    from sklearn.metrics import average_precision_score  # here, not at import: leakbed.plugin loads no scikit-learn

    filled = np.zeros(len(owners), bool) if filled is None else np.asarray(filled, bool)
    positives = owners[:, None] == classes[None, :]
    present = positives.any(axis=0)
    unscored = np.asarray(np.isnan(scores).all(axis=0))
    aps = [
        random_ranking_ap(int(positives[:, j].sum()), len(owners))
        if unscored[j]
        else average_precision_score(positives[:, j], scores[:, j])
        for j in np.flatnonzero(present)
    ]
    ap = float(np.mean(aps))
    counts = positives[:, present].sum(axis=0)
    chance = float(np.mean([random_ranking_ap(int(c), len(owners)) for c in counts]))
    prevalence = float((counts / len(owners)).mean())
    top1, top5 = (float(top_k_hits(owners, classes, scores, k, filled).mean()) for k in TOP)
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
