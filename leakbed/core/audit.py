"""Empirical privacy audit of user-level DP-FedAvg from canary clients: the canaries and their statistics.

k canary clients each hold a secret random unit direction c_j in R^d. Each canary is inserted independently with
probability 1/2; an inserted canary's update is c_j scaled far above the clipping norm (so the device's clipper must
act on it), averaged with the real clients' updates, and DP-FedAvg adds its Gaussian noise. The auditor sees every
round's model delta Δ_t and scores each canary by how much the released models point along c_j. Canaries never
inserted give the null. Three views (``audit_views``), each an ε_emp with a 90% interval (``core.audit_estimates``)
and Steinke et al.'s one-run lower bound beside the most it can show (``core.audit_bound``):

- ``final model``: cos(c_j, Σ_t Δ_t). A never-inserted direction is uniform on the sphere, independent of the
  model: its cosine has mean 0 and spread exactly 1/sqrt(d), so the null is known (Andrew, Kairouz, Oh, Oprea,
  McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024, §4).
- ``all iterates``: Σ_t cos(c_j, Δ_t) over the rounds the canary was due. For a canary inserted every round under
  isotropic Gaussian noise the most powerful test is linear in Σ_t <c_j, Δ_t> (Neyman–Pearson), and the sum of T
  rounds is the T-fold composition of the Gaussian mechanism: its μ is sqrt(T)/z, the exact ε's. Its null depends on
  how the released deltas align across rounds, so both sides are fitted (one spread).
- ``all iterates (max)``: Andrew et al.'s own statistic, max_t cos(c_j, Δ_t): more power when a canary is in one or
  a few unknown rounds, less when it is in all of them; a shift family too, fitted the same way.
"""

from __future__ import annotations

import math

import numpy as np

from leakbed.core.audit_bound import steinke_lower_bound
from leakbed.core.audit_estimates import LEVEL, equal_spread_estimate, known_null_estimate, two_spread_epsilon

VIEWS = ("final model", "all iterates", "all iterates (max)")
STATISTICS = {
    "final model": "cos(c, Σ_t Δ_t); null known: a random direction's cosine in d dimensions",
    "all iterates": "Σ_t cos(c, Δ_t) over the rounds a canary was due; both sides fitted, one spread",
    "all iterates (max)": "max_t cos(c, Δ_t) over the rounds a canary was due (Andrew et al.); both sides fitted, one spread",
}


def canary_directions(k: int, dim: int, seed: int) -> np.ndarray:
    """The k canaries' secret directions, float32 (k, dim) rows of unit L2 norm: isotropic Gaussian draws
    from ``np.random.default_rng(seed)``, normalised, so nearly orthogonal to each other and to any fixed
    update in high dimension. Deterministic per seed, so the server can regenerate rather than store them."""
    if k < 0 or dim <= 0:
        raise ValueError(f"need k >= 0 and dim > 0, got k={k}, dim={dim}")
    rng = np.random.default_rng(seed)
    out = rng.standard_normal((k, dim), dtype=np.float32)  # drawn as float32: no (k, dim) float64 copy
    for row in out:  # row norms accumulated in float64, one row at a time
        row /= np.float32(math.sqrt(float(np.dot(row.astype(np.float64), row.astype(np.float64)))))
    return out


def inserted_mask(k: int, seed: int) -> np.ndarray:
    """Which canaries are inserted: bool (k,), independent fair coins (Steinke et al.'s one-run bound needs
    independent inclusion, not a fixed half). Drawn from ``default_rng([seed, 1])``, a stream independent of
    the directions'. For tiny k it may come out all True or all False; that is allowed (the audit then has
    no null or no signal set and the estimates refuse it), not re-drawn, since re-drawing on the
    outcome would break independence."""
    if k < 0:
        raise ValueError(f"need k >= 0, got {k}")
    return np.random.default_rng([seed, 1]).random(k) < 0.5


def cosines(directions: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Cosine of each (unit) row of ``directions`` with the flat vector ``delta``, float64 (k,); zeros when
    delta is all zero. Computed as directions @ (delta / ‖delta‖) in the directions' float dtype, so a
    (k, d) float32 matrix is never copied or upcast (k ~ 1000 by d ~ 1e6 is 4 GB already); ‖delta‖ in
    float64. float32 products err by ~1e-6 in the cosine, well below the null's spread 1/sqrt(d)."""
    directions = np.asarray(directions)
    if not np.issubdtype(directions.dtype, np.floating):
        directions = directions.astype(np.float64)
    flat = np.asarray(delta).ravel()
    if directions.ndim != 2 or directions.shape[1] != flat.size:
        raise ValueError(f"directions {directions.shape} do not match a delta of {flat.size} values")
    norm = float(np.linalg.norm(flat.astype(np.float64)))
    if norm == 0.0:
        return np.zeros(directions.shape[0])
    unit = (flat.astype(np.float64) / norm).astype(directions.dtype)
    return np.asarray(directions @ unit, dtype=np.float64)


def _rounds(per_round: np.ndarray, due: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    per_round = np.asarray(per_round, dtype=np.float64)
    if per_round.ndim != 2:
        raise ValueError(f"per_round must be (rounds, canaries), got shape {per_round.shape}")
    due = np.ones(per_round.shape, bool) if due is None else np.asarray(due, dtype=bool)
    if due.shape != per_round.shape:
        raise ValueError(f"due {due.shape} does not match per_round {per_round.shape}")
    return per_round, due


def all_iterates_statistic(per_round: np.ndarray, due: np.ndarray | None = None) -> np.ndarray:
    """Σ_t cos(c_j, Δ_t) over the rounds each canary was due (every round without ``due``), (k,), from (T, k)."""
    per_round, due = _rounds(per_round, due)
    return np.where(due, per_round, 0.0).sum(axis=0)


def max_over_rounds(per_round: np.ndarray, due: np.ndarray | None = None) -> np.ndarray:
    """Andrew et al.'s max_t cos(c_j, Δ_t) over the rounds each canary was due, (k,); NaN for a canary never due."""
    per_round, due = _rounds(per_round, due)
    if per_round.shape[0] == 0:
        return np.full(per_round.shape[1], np.nan)
    best = np.where(due, per_round, -np.inf).max(axis=0)
    return np.where(np.isfinite(best), best, np.nan)


def _view(scores: np.ndarray, inserted: np.ndarray, estimate: dict, delta: float, confidence: float) -> dict:
    """An estimate with the one-run bound on the same scores (a canary without a score ranks as 0: no evidence)."""
    bound = steinke_lower_bound(np.nan_to_num(scores, nan=0.0), inserted, delta, confidence)
    ins, out = scores[inserted], scores[~inserted]
    return {
        **estimate,
        "epsilon_two_spreads": two_spread_epsilon(ins[np.isfinite(ins)], out[np.isfinite(out)], delta),
        "epsilon_lower_bound": bound["epsilon"],
        "lower_bound_ceiling": bound["ceiling"],
        "guesses": bound["guesses"],
        "correct": bound["correct"],
    }


def audit_views(final: np.ndarray, per_round: np.ndarray, due: np.ndarray | None, inserted: np.ndarray, dim: int,
                delta: float, confidence: float = 0.95, level: float = LEVEL) -> dict[str, dict]:  # fmt: skip
    """Every view's ε_emp (with its ``level`` interval, counts and spreads) and one-run bound, from the final model's
    cosines (k,), the per-round cosines (T, k), which canaries were due each round (T, k) and which were inserted."""
    inserted = np.asarray(inserted, dtype=bool)
    final = np.asarray(final, dtype=np.float64)
    summed = all_iterates_statistic(per_round, due)
    maxed = max_over_rounds(per_round, due)
    scored = np.isfinite(maxed)
    return {
        "final model": _view(final, inserted, known_null_estimate(
            final[inserted], final[~inserted], 1 / math.sqrt(dim), delta, level), delta, confidence),
        "all iterates": _view(summed, inserted, equal_spread_estimate(
            summed[inserted], summed[~inserted], delta, level), delta, confidence),
        "all iterates (max)": _view(maxed, inserted, equal_spread_estimate(
            maxed[inserted & scored], maxed[~inserted & scored], delta, level), delta, confidence),
    }  # fmt: skip
