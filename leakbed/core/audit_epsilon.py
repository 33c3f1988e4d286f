"""ε at δ between two Gaussians, exactly: what a canary audit turns fitted statistics into.

If a mechanism's output statistic is N(mu0, sigma0²) without a canary and N(mu1, sigma1²) with it, the tightest ε
at δ is the smallest ε with δ(ε) = ∫ max(0, p_a − e^ε p_b) dx <= δ over both orders (a, b). Equal sigmas are the
Gaussian mechanism at μ = |mu1 − mu0| / σ (Balle & Wang 2018's closed form, ``gdp_epsilon``); unequal sigmas make the
region p_a > e^ε p_b a quadratic inequality, so δ(ε) is a difference of normal CDFs over at most two intervals.
Everything is evaluated in log space so that an ε in the thousands (a mechanism with a tenth of its noise) stays finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import log_ndtr

EPS_CEILING = 1e5  # an ε whose δ(ε) is still above δ here counts as unreachable (∞)


def _log_mass(mu: float, sigma: float, lo: float, hi: float) -> float:
    """log P[lo < X < hi] for X ~ N(mu, sigma²), stable in either tail (lo, hi may be ±inf)."""
    a, b = (lo - mu) / sigma, (hi - mu) / sigma
    if not a < b:
        return -math.inf
    if a > 0:  # both in the upper tail: difference of survival functions
        la, lb = float(log_ndtr(-a)), float(log_ndtr(-b))
    else:  # b <= 0 or straddling 0: difference of CDFs (straddling: both logs are well away from -inf)
        lb, la = float(log_ndtr(a)), float(log_ndtr(b))
    if la == -math.inf:
        return -math.inf
    return la + math.log1p(-math.exp(lb - la)) if lb < la else -math.inf


def _log_mass_set(mu: float, sigma: float, intervals: list[tuple[float, float]]) -> float:
    logs = [_log_mass(mu, sigma, lo, hi) for lo, hi in intervals]
    return float(np.logaddexp.reduce(logs)) if logs else -math.inf


def _region(eps: float, mu_a: float, s_a: float, mu_b: float, s_b: float) -> list[tuple[float, float]]:
    """The intervals where p_a(x) > e^ε p_b(x): 2·(log p_a − log p_b − ε) > 0 is A x² + B x + C > 0."""
    A = 1 / s_b**2 - 1 / s_a**2
    B = 2 * mu_a / s_a**2 - 2 * mu_b / s_b**2
    C = mu_b**2 / s_b**2 - mu_a**2 / s_a**2 + 2 * math.log(s_b / s_a) - 2 * eps
    inf = math.inf
    if A == 0:
        if B == 0:
            return [(-inf, inf)] if C > 0 else []
        root = -C / B
        return [(root, inf)] if B > 0 else [(-inf, root)]
    disc = B * B - 4 * A * C
    if disc <= 0:
        return [(-inf, inf)] if A > 0 else []  # the quadratic keeps A's sign (bar a single point)
    q = -0.5 * (B + math.copysign(math.sqrt(disc), B))  # the stable quadratic formula: no cancellation
    r1, r2 = sorted((q / A, C / q))  # q != 0: disc > 0
    return [(-inf, r1), (r2, inf)] if A > 0 else [(r1, r2)]


def _hockey_stick(eps: float, mu_a: float, s_a: float, mu_b: float, s_b: float) -> float:
    """∫ max(0, p_a − e^ε p_b) dx exactly: P_a(S) − e^ε P_b(S) over the region S, in log space so that
    both tiny terms of a large ε keep their relative precision."""
    region = _region(eps, mu_a, s_a, mu_b, s_b)
    la = _log_mass_set(mu_a, s_a, region)
    if la == -math.inf:
        return 0.0
    lb = _log_mass_set(mu_b, s_b, region) + eps
    return max(0.0, -math.expm1(lb - la) * math.exp(la)) if lb < la else 0.0


def pair_delta(eps: float, mu0: float, sigma0: float, mu1: float, sigma1: float) -> float:
    """δ(ε) of the pair by the exact interval integral, max over both orders (any sigmas > 0)."""
    return max(_hockey_stick(eps, mu0, sigma0, mu1, sigma1), _hockey_stick(eps, mu1, sigma1, mu0, sigma0))


def gdp_delta(eps: float, mu: float) -> float:
    """Balle & Wang (2018)'s δ(ε) of the Gaussian mechanism at μ: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),
    evaluated in log space for large ε."""
    if mu == 0:
        return 0.0
    l1 = float(log_ndtr(-eps / mu + mu / 2))
    l2 = float(log_ndtr(-eps / mu - mu / 2)) + eps
    return max(0.0, -math.expm1(l2 - l1) * math.exp(l1)) if l2 < l1 else 0.0


def smallest_epsilon(delta_of: Callable[[float], float], delta: float) -> float:
    """The smallest ε >= 0 with delta_of(ε) <= delta for a non-increasing delta_of, by bisection (∞ past the ceiling)."""
    if delta_of(0.0) <= delta:
        return 0.0
    if delta_of(EPS_CEILING) > delta:
        return math.inf
    lo, hi = 0.0, EPS_CEILING  # invariant: delta_of(lo) > delta >= delta_of(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if delta_of(mid) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return hi


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε at δ of the Gaussian mechanism whose two outputs are μ standard deviations apart (μ-GDP); symmetric in μ.
    T Gaussian releases of noise multiplier z compose exactly to μ = sqrt(T)/z."""
    if not math.isfinite(mu):
        return math.inf
    return smallest_epsilon(lambda eps: gdp_delta(eps, abs(mu)), delta)


def gaussian_pair_epsilon(mu0: float, sigma0: float, mu1: float, sigma1: float, delta: float) -> float:
    """ε at δ of the privacy curve between N(mu0, sigma0²) and N(mu1, sigma1²): 0.0 when δ(0) is already <= delta,
    math.inf when not reached below ``EPS_CEILING``. A zero sigma (a point mass) is ∞ apart from anything but the
    same point mass."""
    values = (mu0, sigma0, mu1, sigma1, delta)
    if not all(math.isfinite(v) for v in values) or sigma0 < 0 or sigma1 < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need finite means, sigmas >= 0 and 0 <= delta <= 1, got {values}")
    if sigma0 == 0 or sigma1 == 0:
        return 0.0 if (sigma0 == sigma1 and mu0 == mu1) or delta >= 1 else math.inf
    if sigma0 == sigma1:
        return gdp_epsilon((mu1 - mu0) / sigma0, delta)
    return smallest_epsilon(lambda eps: pair_delta(eps, mu0, sigma0, mu1, sigma1), delta)
