"""Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run" (NeurIPS 2023): a lower bound on ε.

m canaries, each inserted independently with probability 1/2; guess "inserted" for the top r/2 by score and "held out"
for the bottom r/2 (fixed before looking at the outcome). If the mechanism were (ε, δ)-DP, each guess would be at best
randomized response, so many correct guesses are unlikely (Theorem 3 and its δ > 0 extension): the largest ε the
count of correct guesses rejects at a confidence is a valid lower bound on the run's ε. It is capped by the canary
count: with every guess right the bound is ``lower_bound_ceiling`` (about ln(r / ln(1/0.05))), so one run with 128
canaries can show at most about 3, whatever the true ε.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import expit

LOWER_BOUND_CEILING = 100.0  # the bound is searched in [0, 100]


def steinke_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """The p-value of at least v correct guesses out of r among m canaries if the mechanism were (ε, δ)-DP: each guess
    is right with probability at most q = e^ε/(1+e^ε), so β = P[Binomial(r, q) >= v]; δ adds 2·m·δ·α with
    α = max over i = 1..v of P[v−i <= Binomial(r, q) < v]/i. Returns min(1, β + 2mδα)."""
    if not (0 <= v <= r <= m and epsilon >= 0 and 0 <= delta <= 1):
        raise ValueError(f"need 0 <= v <= r <= m, epsilon >= 0, 0 <= delta <= 1; got {m, r, v, epsilon, delta}")
    q = float(expit(epsilon))
    beta = float(stats.binom.sf(v - 1, r, q))
    if v == 0:
        return min(1.0, beta)
    below = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[B = v−1], P[B = v−2], …, P[B = 0]
    alpha = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))  # i-th entry: P[v−i <= B < v] / i
    return min(1.0, beta + 2 * m * delta * alpha)


def _largest_rejected(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest ε in [0, 100] that v correct guesses of r reject at ``confidence`` (0.0 when not even ε = 0 is)."""

    def rejected(eps: float) -> bool:
        return steinke_p_value(m, r, v, eps, delta) <= 1 - confidence

    if r == 0 or not rejected(0.0):
        return 0.0
    if rejected(LOWER_BOUND_CEILING):
        return LOWER_BOUND_CEILING
    lo, hi = 0.0, LOWER_BOUND_CEILING  # invariant: lo rejected, hi not
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo  # the rejected end: conservative


def default_guesses(m: int) -> int:
    """r = m//2 rounded down to even: abstain on the middle half of the canaries, where guesses are least reliable."""
    return (m // 2) // 2 * 2


def lower_bound_ceiling(m: int, delta: float, confidence: float = 0.95, guesses: int | None = None) -> float:
    """The most the one-run bound can show with m canaries: its value when every guess is right. A claimed ε above
    it cannot be tested by this bound in one run, however broken the mechanism."""
    r = default_guesses(m) if guesses is None else guesses // 2 * 2
    return _largest_rejected(m, r, r, delta, confidence)


def steinke_lower_bound(
    scores: np.ndarray, inserted: np.ndarray, delta: float, confidence: float = 0.95, guesses: int | None = None
) -> dict:
    """The one-run lower bound from canary scores and the true inclusion mask: canaries ranked by score (ties in index
    order), the top guesses//2 guessed inserted, the bottom guesses//2 held out; the largest ε rejected at
    ``confidence`` (valid with that probability), its ceiling (every guess right), and the counts."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    inserted = np.asarray(inserted, dtype=bool).ravel()
    m = scores.size
    if inserted.size != m:
        raise ValueError(f"{m} scores but {inserted.size} inclusion flags")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if guesses is None:
        guesses = default_guesses(m)
    if not 0 <= guesses <= m:
        raise ValueError(f"guesses must be in [0, {m}], got {guesses}")
    half = guesses // 2
    r = 2 * half
    order = np.argsort(-scores, kind="stable")
    v = int(inserted[order[:half]].sum() + (~inserted[order[m - half :]]).sum()) if half else 0
    return {
        "epsilon": _largest_rejected(m, r, v, delta, confidence),
        "ceiling": _largest_rejected(m, r, r, delta, confidence),
        "guesses": r,
        "correct": v,
        "canaries": m,
        "confidence": confidence,
    }
