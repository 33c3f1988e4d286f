"""Score-matrix helpers shared by the attacks that write rankings and the referee that rebuilds a bound from them."""

from __future__ import annotations

import numpy as np


def tie_break(scores: np.ndarray, seed: int) -> np.ndarray:
    """A seeded jitter far below any real score difference: without signal the ranking is random, not tied."""
    rng = np.random.default_rng([seed, 0x3E7A])
    return scores + 1e-9 * rng.random(scores.shape)


def group_mean(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each row replaced by the mean row of its group."""
    out = np.empty_like(scores)
    for g in np.unique(labels):
        sel = labels == g
        out[sel] = scores[sel].mean(axis=0)
    return out
