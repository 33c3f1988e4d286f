"""``core.audit``: the canary audit's math (Andrew et al.'s Gaussian-fit ε, Steinke et al.'s one-run bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logit

from leakbed.core.audit import (
    _pair_delta,
    all_iterates_statistic,
    amplified_epsilon,
    andrew_epsilon,
    canary_directions,
    cosines,
    gaussian_pair_epsilon,
    inserted_mask,
    steinke_lower_bound,
    steinke_p_value,
)
from leakbed.core.privacy import rdp_epsilon

DELTA = 1e-5


def closed_form_delta(eps: float, mu: float) -> float:
    """Balle & Wang's δ(ε) of μ-GDP, written out here independently of the module (plain CDFs)."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def invert(delta_of, delta: float) -> float:
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if delta_of(mid) <= delta else (mid, hi)
    return hi


def grid_delta(eps: float, mu0: float, s0: float, mu1: float, s1: float) -> float:
    """δ(ε) by brute force: ∫ max(0, p_a − e^ε p_b) on a fine grid, both orders."""
    x = np.linspace(-60, 60, 2_000_001)
    p0, p1 = stats.norm.pdf(x, mu0, s0), stats.norm.pdf(x, mu1, s1)
    return max(
        float(np.trapezoid(np.maximum(0, p0 - math.exp(eps) * p1), x)),
        float(np.trapezoid(np.maximum(0, p1 - math.exp(eps) * p0), x)),
    )


def test_directions_are_unit_deterministic_and_seeded():
    d = canary_directions(50, 4096, seed=3)
    assert d.shape == (50, 4096) and d.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(d.astype(np.float64), axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(d, canary_directions(50, 4096, seed=3))
    assert not np.allclose(d, canary_directions(50, 4096, seed=4))
    off = np.abs(d @ d.T - np.eye(50))
    assert off.max() < 0.1  # nearly orthogonal in high dimension (1/sqrt(4096) ≈ 0.016 typical)


def test_mask_is_independent_fair_coins():
    mask = inserted_mask(1000, seed=0)
    assert mask.dtype == bool and mask.shape == (1000,)
    assert 430 <= mask.sum() <= 570
    np.testing.assert_array_equal(mask, inserted_mask(1000, seed=0))
    assert (mask != inserted_mask(1000, seed=1)).any()
    # the documented stream, apart from the directions' default_rng(seed): the server can redraw it
    np.testing.assert_array_equal(mask, np.random.default_rng([0, 1]).random(1000) < 0.5)
    assert (mask != (np.random.default_rng(0).random(1000) < 0.5)).any()


def test_cosines_match_a_direct_computation():
    d = canary_directions(7, 300, seed=1)
    delta = np.random.default_rng(2).standard_normal(300)
    delta[:5] += 10 * d[0, :5]
    direct = [float(np.dot(row, delta) / (np.linalg.norm(row) * np.linalg.norm(delta))) for row in d.astype(np.float64)]
    got = cosines(d, delta)
    assert got.shape == (7,)
    np.testing.assert_allclose(got, direct, atol=1e-6)
    np.testing.assert_allclose(cosines(d, delta.reshape(20, 15)), direct, atol=1e-6)  # any shape, flattened
    np.testing.assert_array_equal(cosines(d, np.zeros(300)), np.zeros(7))
    assert cosines(d, 3.0 * d[4])[4] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        cosines(d, np.ones(299))


def test_all_iterates_is_the_sum_over_rounds():
    per_round = np.array([[0.1, -0.2, 0.0], [0.3, 0.1, -0.1]])
    np.testing.assert_allclose(all_iterates_statistic(per_round), [0.4, -0.1, -0.1])
    with pytest.raises(ValueError):
        all_iterates_statistic(np.ones(3))


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_equal_sigmas_match_the_gaussian_mechanism(mu):
    expected = invert(lambda e: closed_form_delta(e, mu), DELTA)
    assert gaussian_pair_epsilon(0.0, 1.0, mu, 1.0, DELTA) == pytest.approx(expected, rel=1e-3)
    assert gaussian_pair_epsilon(5.0, 2.0, 5.0 - 2 * mu, 2.0, DELTA) == pytest.approx(expected, rel=1e-3)  # shift, scale
    # the general (interval-integral) path on equal sigmas agrees with the closed form
    for eps in (0.0, 0.5, 2.0, expected):
        assert _pair_delta(eps, 0.0, 1.0, mu, 1.0) == pytest.approx(closed_form_delta(eps, mu), rel=1e-6, abs=1e-300)
    # and a hair's difference in sigma (the quadratic path) lands on the same ε
    assert gaussian_pair_epsilon(0.0, 1.0, mu, 1.0 + 1e-9, DELTA) == pytest.approx(expected, rel=1e-3)


def test_one_gdp_at_1e5():
    eps = gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, DELTA)
    assert 4.3 < eps < 4.5  # ≈ 4.38
    assert closed_form_delta(eps, 1.0) == pytest.approx(DELTA, rel=1e-3)
    assert gaussian_pair_epsilon(0.0, 1.0, 0.0, 1.0, DELTA) == 0.0  # identical: no loss
    assert gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, 0.5) == 0.0  # δ(0) ≈ 0.38 <= 0.5
    assert gaussian_pair_epsilon(0.0, 0.0, 1.0, 1.0, DELTA) == math.inf  # a point mass
    assert gaussian_pair_epsilon(0.0, 1.0, 1e4, 1.0, DELTA) == math.inf  # not reached below ε = 1000


@pytest.mark.parametrize(("mu1", "s1"), [(1.0, 2.0), (0.0, 1.5), (2.0, 0.7)])
def test_unequal_sigmas_match_a_brute_force_integral(mu1, s1):
    for eps in (0.0, 0.5, 2.0, 4.0):
        assert _pair_delta(eps, 0.0, 1.0, mu1, s1) == pytest.approx(grid_delta(eps, 0.0, 1.0, mu1, s1), rel=1e-4, abs=1e-9)
    eps = gaussian_pair_epsilon(0.0, 1.0, mu1, s1, DELTA)
    assert 0 < eps < 50
    assert grid_delta(eps, 0.0, 1.0, mu1, s1) == pytest.approx(DELTA, rel=1e-3)
    assert grid_delta(0.95 * eps, 0.0, 1.0, mu1, s1) > DELTA  # the smallest such ε
    assert gaussian_pair_epsilon(mu1, s1, 0.0, 1.0, DELTA) == pytest.approx(eps, rel=1e-9)  # symmetric


def test_large_epsilon_stays_finite_and_monotone():
    deltas = [_pair_delta(e, 0.0, 1.0, 1.0, 3.0) for e in (10.0, 30.0, 60.0, 100.0)]
    assert all(d > 0 for d in deltas) and deltas == sorted(deltas, reverse=True)
    eps = gaussian_pair_epsilon(0.0, 1.0, 1.0, 3.0, 1e-30)
    assert math.isfinite(eps) and eps > gaussian_pair_epsilon(0.0, 1.0, 1.0, 3.0, DELTA)


@pytest.mark.parametrize("seed", range(5))
def test_andrew_recovers_the_gaussian_mechanism(seed):
    rng = np.random.default_rng(seed)
    held_out = rng.normal(0.0, 1.0, 2000)
    true_eps = gaussian_pair_epsilon(0.0, 1.0, 2.0, 1.0, DELTA)  # ≈ 10.0
    assert andrew_epsilon(rng.normal(2.0, 1.0, 2000), held_out, DELTA) == pytest.approx(true_eps, rel=0.25)
    assert andrew_epsilon(rng.normal(0.0, 1.0, 2000), held_out, DELTA) < 1.0


def test_andrew_needs_two_per_set():
    with pytest.raises(ValueError, match="at least 2"):
        andrew_epsilon(np.array([1.0]), np.zeros(10), DELTA)


def test_p_value_is_a_monotone_probability():
    for m, r, v in [(1000, 500, 400), (1000, 500, 260), (100, 50, 50), (1000, 500, 0)]:
        ps = [steinke_p_value(m, r, v, eps, DELTA) for eps in np.linspace(0, 10, 101)]
        assert all(0 <= p <= 1 for p in ps)
        assert all(b >= a - 1e-12 for a, b in zip(ps, ps[1:], strict=False))
    # δ = 0 is Theorem 3's binomial tail exactly
    assert steinke_p_value(100, 50, 40, 1.0, 0.0) == pytest.approx(stats.binom.sf(39, 50, math.e / (1 + math.e)))
    assert steinke_p_value(100, 50, 40, 1.0, DELTA) > steinke_p_value(100, 50, 40, 1.0, 0.0)  # the δ term adds
    assert steinke_p_value(100, 50, 0, 1.0, DELTA) == 1.0


def test_steinke_perfect_separation():
    mask = inserted_mask(1000, seed=0)
    scores = mask + 0.5 * np.random.default_rng(0).random(1000)  # every inserted canary above every held-out one
    res = steinke_lower_bound(scores, mask, DELTA)
    assert res["guesses"] == 500 and res["correct"] == 500 and res["canaries"] == 1000 and res["confidence"] == 0.95
    ceiling = float(logit(0.05 ** (1 / 500)))  # all r right under δ = 0: q^r = 0.05, ≈ 5.11
    assert 3.0 < res["epsilon"] < ceiling
    p_at, p_above = (steinke_p_value(1000, 500, 500, res["epsilon"] + e, DELTA) for e in (0.0, 1e-3))
    assert p_at <= 0.05 < p_above  # the largest rejected ε
    fewer = steinke_lower_bound(scores, mask, DELTA, guesses=101)  # rounded down to 50 + 50
    assert fewer["guesses"] == 100 and fewer["correct"] == 100 and fewer["epsilon"] < res["epsilon"]


def test_steinke_without_signal_is_zero_at_95_percent():
    zeros = sum(
        steinke_lower_bound(np.random.default_rng([seed, 7]).random(1000), inserted_mask(1000, seed), DELTA)["epsilon"] == 0.0
        for seed in range(20)
    )
    assert zeros >= 18


def test_steinke_is_sound_for_the_gaussian_mechanism():
    true_eps = gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, DELTA)
    bounds = []
    for seed in range(10):
        mask = inserted_mask(1000, seed)
        scores = np.random.default_rng([seed, 9]).standard_normal(1000) + mask  # 1-GDP per canary
        bounds.append(steinke_lower_bound(scores, mask, DELTA)["epsilon"])
    assert max(bounds) <= true_eps
    assert min(bounds) > 0.5  # and the audit does see the signal (≈ 0.9–1.3)


def test_steinke_rejects_bad_input():
    with pytest.raises(ValueError):
        steinke_lower_bound(np.zeros(10), np.zeros(9, bool), DELTA)
    with pytest.raises(ValueError):
        steinke_lower_bound(np.zeros(10), np.zeros(10, bool), DELTA, guesses=11)
    assert steinke_lower_bound(np.zeros(10), np.ones(10, bool), DELTA, guesses=0)["epsilon"] == 0.0


def test_amplification_by_sampling_helps():
    amplified = amplified_epsilon(1.0, 10 / 100, 100, DELTA)
    unamplified = rdp_epsilon(1.0, 10, 100, 100, DELTA)
    assert amplified is not None and unamplified is not None
    assert 0 < amplified < unamplified
    assert amplified_epsilon(1.0, 1.0, 100, DELTA) == pytest.approx(unamplified, rel=0.05)  # q = 1: no amplification
    assert amplified_epsilon(0.0, 0.1, 100, DELTA) is None
    assert amplified_epsilon(1.0, 0.1, 0, DELTA) is None
