"""ε_emp with an interval: Andrew et al.'s one-shot estimate (ICLR 2024), fitted so that noise does not read as leakage.

A canary's statistic without insertion follows the null; inserted, the same law shifted by the canary's signal (for
cosines with released deltas the noise and the other clients' contributions are the same random projection either
way). So both sides have one spread, and the privacy they show is that of the Gaussian mechanism at μ = shift /
spread: ε_emp = ``gdp_epsilon(μ)``. Two fits:

- ``known_null_estimate``: the null is known exactly where the statistic is a random direction's cosine with a fixed
  vector in d dimensions (the final model): mean 0, spread 1/sqrt(d). Only the shift is estimated, from the inserted
  canaries' mean; the interval is Student's t on that mean with the inserted canaries' own spread.
- ``equal_spread_estimate``: both sides fitted with one pooled spread (statistics whose null depends on the run: the
  sum or the maximum over rounds); μ is Hedges' g, its interval the large-sample one of Hedges & Olkin (1985).

Fitting the two spreads apart (``two_spread_epsilon``, Andrew et al.'s own fit) makes any chance difference between
them read as privacy loss: with 64 canaries a side it runs about 20% high on an honest mechanism.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from leakbed.core.audit_epsilon import gaussian_pair_epsilon, gdp_epsilon

LEVEL = 0.9  # the intervals' coverage


def _sides(inserted: np.ndarray, held_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ins = np.asarray(inserted, dtype=np.float64).ravel()
    out = np.asarray(held_out, dtype=np.float64).ravel()
    if ins.size < 2 or out.size < 2:
        raise ValueError(f"need at least 2 inserted and 2 held-out statistics, got {ins.size} and {out.size}")
    if not (np.isfinite(ins).all() and np.isfinite(out).all()):
        raise ValueError("canary statistics must be finite")
    return ins, out


def epsilon_interval(mu_lo: float, mu_hi: float, delta: float) -> tuple[float, float]:
    """The ε interval of a μ interval: ε(μ) is symmetric and grows with |μ|, so an interval across 0 starts at 0."""
    if mu_lo <= 0 <= mu_hi:
        return 0.0, gdp_epsilon(max(-mu_lo, mu_hi), delta)
    near, far = sorted((abs(mu_lo), abs(mu_hi)))
    return gdp_epsilon(near, delta), gdp_epsilon(far, delta)


def _described(ins: np.ndarray, out: np.ndarray, mu: float, lo: float, hi: float, delta: float, level: float) -> dict:
    eps_lo, eps_hi = epsilon_interval(lo, hi, delta)
    return {
        "epsilon_emp": gdp_epsilon(mu, delta),
        "interval": [eps_lo, eps_hi],
        "level": level,
        "mu": mu,
        "mu_interval": [lo, hi],
        "inserted": int(ins.size),
        "held_out": int(out.size),
        "mean_inserted": float(ins.mean()),
        "mean_held_out": float(out.mean()),
        "spread_inserted": float(ins.std(ddof=1)),
        "spread_held_out": float(out.std(ddof=1)),
    }


def known_null_estimate(inserted: np.ndarray, held_out: np.ndarray, null_spread: float, delta: float,
                        level: float = LEVEL) -> dict:  # fmt: skip
    """ε_emp against a null known exactly (mean 0, spread ``null_spread``): μ = mean(inserted) / null_spread, with a
    t interval from the inserted canaries' own spread. The held-out canaries only check the null (their spread is
    reported beside it)."""
    ins, out = _sides(inserted, held_out)
    if not null_spread > 0:
        raise ValueError(f"null_spread must be > 0, got {null_spread}")
    mu = float(ins.mean()) / null_spread
    half = float(stats.t.ppf((1 + level) / 2, ins.size - 1)) * float(ins.std(ddof=1)) / null_spread / math.sqrt(ins.size)
    out_dict = _described(ins, out, mu, mu - half, mu + half, delta, level)
    return {**out_dict, "fit": "known null", "spread_null": null_spread}


def equal_spread_estimate(inserted: np.ndarray, held_out: np.ndarray, delta: float, level: float = LEVEL) -> dict:
    """ε_emp from both sides fitted with one pooled spread: μ = Hedges' g (the standardised mean difference, corrected
    for its small-sample bias), interval μ ± z·sqrt(1/n1 + 1/n2 + μ²/(2(n1 + n2 − 2)))."""
    ins, out = _sides(inserted, held_out)
    n1, n2 = ins.size, out.size
    df = n1 + n2 - 2
    pooled = math.sqrt(((n1 - 1) * ins.var(ddof=1) + (n2 - 1) * out.var(ddof=1)) / df)
    diff = float(ins.mean() - out.mean())
    if pooled == 0:
        mu = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        return {**_described(ins, out, mu, mu, mu, delta, level), "fit": "equal spreads", "spread_null": None}
    mu = diff / pooled * (1 - 3 / (4 * df - 1))
    half = float(stats.norm.ppf((1 + level) / 2)) * math.sqrt(1 / n1 + 1 / n2 + mu * mu / (2 * df))
    return {**_described(ins, out, mu, mu - half, mu + half, delta, level), "fit": "equal spreads", "spread_null": None}


def two_spread_epsilon(inserted: np.ndarray, held_out: np.ndarray, delta: float) -> float:
    """Andrew et al.'s own fit, for comparison: a Gaussian (mean, std with ddof=1) per side, the ε at δ between them."""
    ins, out = _sides(inserted, held_out)
    return gaussian_pair_epsilon(float(out.mean()), float(out.std(ddof=1)), float(ins.mean()), float(ins.std(ddof=1)), delta)
