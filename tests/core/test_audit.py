"""The canary audit's math: the statistics (``core.audit``), ε between Gaussians, ε_emp with its interval and its
coverage over seeds, Steinke et al.'s one-run bound and its ceiling, the exact accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logit

from leakbed.core.audit import (
    all_iterates_statistic,
    audit_views,
    canary_directions,
    cosines,
    inserted_mask,
    max_over_rounds,
)
from leakbed.core.audit_bound import lower_bound_ceiling, steinke_lower_bound, steinke_p_value
from leakbed.core.audit_epsilon import gaussian_pair_epsilon, gdp_epsilon, pair_delta
from leakbed.core.audit_estimates import epsilon_interval, equal_spread_estimate, known_null_estimate, two_spread_epsilon
from leakbed.core.privacy import pld_epsilon, poisson_epsilon, rdp_epsilon
from leakbed.reference.audit_coverage import simulate, simulated_coverage

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


def test_all_iterates_is_the_sum_and_andrews_the_max_over_the_rounds_due():
    per_round = np.array([[0.1, -0.2, 0.0], [0.3, 0.1, -0.1]])
    np.testing.assert_allclose(all_iterates_statistic(per_round), [0.4, -0.1, -0.1])
    due = np.array([[True, False, False], [True, True, False]])
    np.testing.assert_allclose(all_iterates_statistic(per_round, due), [0.4, 0.1, 0.0])
    np.testing.assert_allclose(max_over_rounds(per_round, due), [0.3, 0.1, np.nan])  # never due: no score
    np.testing.assert_allclose(max_over_rounds(per_round), [0.3, 0.1, 0.0])
    with pytest.raises(ValueError):
        all_iterates_statistic(np.ones(3))
    with pytest.raises(ValueError):
        max_over_rounds(per_round, due[:1])


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_equal_sigmas_match_the_gaussian_mechanism(mu):
    expected = invert(lambda e: closed_form_delta(e, mu), DELTA)
    assert gaussian_pair_epsilon(0.0, 1.0, mu, 1.0, DELTA) == pytest.approx(expected, rel=1e-3)
    assert gaussian_pair_epsilon(5.0, 2.0, 5.0 - 2 * mu, 2.0, DELTA) == pytest.approx(expected, rel=1e-3)  # shift, scale
    # the general (interval-integral) path on equal sigmas agrees with the closed form
    for eps in (0.0, 0.5, 2.0, expected):
        assert pair_delta(eps, 0.0, 1.0, mu, 1.0) == pytest.approx(closed_form_delta(eps, mu), rel=1e-6, abs=1e-300)
    # and a hair's difference in sigma (the quadratic path) lands on the same ε
    assert gaussian_pair_epsilon(0.0, 1.0, mu, 1.0 + 1e-9, DELTA) == pytest.approx(expected, rel=1e-3)


def test_one_gdp_at_1e5():
    eps = gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, DELTA)
    assert 4.3 < eps < 4.5  # ≈ 4.38
    assert closed_form_delta(eps, 1.0) == pytest.approx(DELTA, rel=1e-3)
    assert gaussian_pair_epsilon(0.0, 1.0, 0.0, 1.0, DELTA) == 0.0  # identical: no loss
    assert gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, 0.5) == 0.0  # δ(0) ≈ 0.38 <= 0.5
    assert gaussian_pair_epsilon(0.0, 0.0, 1.0, 1.0, DELTA) == math.inf  # a point mass
    assert gaussian_pair_epsilon(0.0, 1.0, 1e4, 1.0, DELTA) == math.inf  # not reached below ε = 1e5


@pytest.mark.parametrize(("mu1", "s1"), [(1.0, 2.0), (0.0, 1.5), (2.0, 0.7)])
def test_unequal_sigmas_match_a_brute_force_integral(mu1, s1):
    for eps in (0.0, 0.5, 2.0, 4.0):
        assert pair_delta(eps, 0.0, 1.0, mu1, s1) == pytest.approx(grid_delta(eps, 0.0, 1.0, mu1, s1), rel=1e-4, abs=1e-9)
    eps = gaussian_pair_epsilon(0.0, 1.0, mu1, s1, DELTA)
    assert 0 < eps < 50
    assert grid_delta(eps, 0.0, 1.0, mu1, s1) == pytest.approx(DELTA, rel=1e-3)
    assert grid_delta(0.95 * eps, 0.0, 1.0, mu1, s1) > DELTA  # the smallest such ε
    assert gaussian_pair_epsilon(mu1, s1, 0.0, 1.0, DELTA) == pytest.approx(eps, rel=1e-9)  # symmetric


def test_large_epsilon_stays_finite_and_monotone():
    deltas = [pair_delta(e, 0.0, 1.0, 1.0, 3.0) for e in (10.0, 30.0, 60.0, 100.0)]
    assert all(d > 0 for d in deltas) and deltas == sorted(deltas, reverse=True)
    eps = gaussian_pair_epsilon(0.0, 1.0, 1.0, 3.0, 1e-30)
    assert math.isfinite(eps) and eps > gaussian_pair_epsilon(0.0, 1.0, 1.0, 3.0, DELTA)


def test_epsilon_in_the_thousands_stays_finite():
    """A tenth of the noise over 20 rounds: μ = 44.7, ε ≈ 1,190 (dp_accounting's PLD says 1,190.7)."""
    assert gdp_epsilon(math.sqrt(20) / 0.1, DELTA) == pytest.approx(1190.7, rel=1e-3)
    assert gdp_epsilon(-2.0, DELTA) == gdp_epsilon(2.0, DELTA)  # symmetric in μ
    assert gdp_epsilon(math.inf, DELTA) == math.inf


@pytest.mark.parametrize("seed", range(5))
def test_the_estimates_recover_the_gaussian_mechanism(seed):
    rng = np.random.default_rng(seed)
    true_eps = gdp_epsilon(2.0, DELTA)  # ≈ 10.0
    held_out, inserted = rng.normal(0.0, 1.0, 2000), rng.normal(2.0, 1.0, 2000)
    for est in (known_null_estimate(inserted, held_out, 1.0, DELTA), equal_spread_estimate(inserted, held_out, DELTA)):
        lo, hi = est["interval"]
        assert lo <= est["epsilon_emp"] <= hi and hi - lo < 0.4 * true_eps
        assert est["epsilon_emp"] == pytest.approx(true_eps, rel=0.1) and est["mu"] == pytest.approx(2.0, abs=0.1)
        assert est["inserted"] == est["held_out"] == 2000 and est["level"] == 0.9
        assert est["spread_inserted"] == pytest.approx(1.0, rel=0.1) and est["spread_held_out"] == pytest.approx(1.0, rel=0.1)
    assert two_spread_epsilon(inserted, held_out, DELTA) == pytest.approx(true_eps, rel=0.25)
    nothing = known_null_estimate(rng.normal(0.0, 1.0, 200), held_out, 1.0, DELTA)
    assert nothing["interval"][0] < 0.05 and nothing["interval"][1] < 1.0  # no signal: an interval near ε = 0


def test_a_known_null_is_not_fitted_and_a_scaled_statistic_gives_the_same_epsilon():
    rng = np.random.default_rng(1)
    ins, out = rng.normal(3.0, 1.0, 64), rng.normal(0.0, 1.0, 64)
    a, b = known_null_estimate(ins, out, 1.0, DELTA), known_null_estimate(ins / 100, out * 7, 0.01, DELTA)
    assert a["epsilon_emp"] == pytest.approx(b["epsilon_emp"]) and a["interval"] == pytest.approx(b["interval"])
    c, d = equal_spread_estimate(ins, out, DELTA), equal_spread_estimate(5 * ins + 2, 5 * out + 2, DELTA)
    assert c["epsilon_emp"] == pytest.approx(d["epsilon_emp"]) and c["spread_null"] is None


def test_epsilon_interval_of_a_mu_interval():
    assert epsilon_interval(-0.5, 1.0, DELTA) == (0.0, gdp_epsilon(1.0, DELTA))
    assert epsilon_interval(-3.0, -1.0, DELTA) == (gdp_epsilon(1.0, DELTA), gdp_epsilon(3.0, DELTA))


def test_the_estimates_need_two_per_side():
    with pytest.raises(ValueError, match="at least 2"):
        equal_spread_estimate(np.array([1.0]), np.zeros(10), DELTA)
    with pytest.raises(ValueError, match="at least 2"):
        two_spread_epsilon(np.zeros(10), np.array([1.0]), DELTA)


def test_the_simulation_draws_the_statistics_in_distribution():
    """Held-out canaries' cosines spread 1/sqrt(d) (final model) and sqrt(T/d) (summed over T rounds)."""
    dim, rounds = 72_042, 20
    runs = [simulate(seed, dim=dim, rounds=rounds) for seed in range(20)]
    final = np.concatenate([s["final"][~s["inserted"]] for s in runs])
    summed = np.concatenate([s["per_round"].sum(0)[~s["inserted"]] for s in runs])
    assert final.std() * math.sqrt(dim) == pytest.approx(1.0, abs=0.1) and abs(final.mean()) * math.sqrt(dim) < 0.15
    assert summed.std() * math.sqrt(dim / rounds) == pytest.approx(1.0, abs=0.1)


def test_an_honest_runs_interval_holds_the_exact_epsilon_in_about_90_percent_of_seeds():
    """600 simulated honest runs at the audit config's size (d = 72,042, 128 candidates, 20 rounds, z = 1; exact ε
    28.37, the accountant's 30.13): each view's interval holds the exact ε in about 90% of them, the flag fires on at
    most a few; Andrew et al.'s two-spread fit on the same statistics runs high (the issue's Monte Carlo)."""
    out = simulated_coverage(600)
    assert out["epsilon_exact"] == pytest.approx(28.37, abs=0.01) and out["epsilon_accountant"] == pytest.approx(30.13, abs=0.01)
    for view, low in (("final model", 0.85), ("all iterates", 0.83)):
        assert low <= out[view]["coverage"] <= 0.95, (view, out[view])
        assert out[view]["flagged"] <= 0.03 and abs(out[view]["median"] / 28.37 - 1) < 0.05
    assert out["final model"]["median_width"] < out["all iterates"]["median_width"]  # the known null is the sharper
    assert out["two spreads"]["median"] > 1.1 * 28.37 and out["two spreads"]["above_accountant"] > 0.5


def test_the_views_of_one_run():
    s = simulate(3, k=200, dim=20_000, rounds=8, z=2.0)
    views = audit_views(s["final"], s["per_round"], None, s["inserted"], 20_000, DELTA, 0.95)
    assert list(views) == ["final model", "all iterates", "all iterates (max)"]
    exact = gdp_epsilon(math.sqrt(8) / 2.0, DELTA)
    for name, view in views.items():
        assert view["guesses"] == 100 and view["lower_bound_ceiling"] == pytest.approx(lower_bound_ceiling(200, DELTA))
        assert view["epsilon_lower_bound"] <= min(exact, view["lower_bound_ceiling"]), name
    assert views["final model"]["fit"] == "known null" and views["all iterates"]["fit"] == "equal spreads"
    assert views["all iterates (max)"]["epsilon_emp"] < views["all iterates"]["epsilon_emp"]


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
    assert 3.0 < res["epsilon"] < ceiling and res["epsilon"] == res["ceiling"]
    p_at, p_above = (steinke_p_value(1000, 500, 500, res["epsilon"] + e, DELTA) for e in (0.0, 1e-3))
    assert p_at <= 0.05 < p_above  # the largest rejected ε
    fewer = steinke_lower_bound(scores, mask, DELTA, guesses=101)  # rounded down to 50 + 50
    assert fewer["guesses"] == 100 and fewer["correct"] == 100 and fewer["epsilon"] < res["epsilon"]


@pytest.mark.parametrize(("m", "most"), [(128, 3.03), (200, 3.49), (1024, 5.11), (4096, 6.42)])
def test_the_most_one_run_can_show(m, most):
    """Every guess right, 95%: with 128 canaries no claim above 3.03 can be tested by the one-run bound."""
    assert lower_bound_ceiling(m, DELTA) == pytest.approx(most, abs=0.01)


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


def test_the_exact_accountant_beside_flowers_rdp():
    """20 releases at δ = 1e-5: PLD 28.37 (z = 1), 77.3 / 11.5 / 4.98 (z = 0.5 / 2 / 4) where RDP says 30.13 and
    81.1 / 12.3 / 5.38; T Gaussians compose exactly into μ = sqrt(T)/z."""
    for z, exact, rdp in ((1.0, 28.37, 30.13), (0.5, 77.33, 81.12), (2.0, 11.48, 12.30), (4.0, 4.98, 5.38)):
        assert pld_epsilon(z, 20, DELTA) == pytest.approx(exact, abs=0.01)
        assert pld_epsilon(z, 20, DELTA) == pytest.approx(gdp_epsilon(math.sqrt(20) / z, DELTA), abs=2e-3)
        assert rdp_epsilon(z, 60, 60, 20, DELTA) == pytest.approx(rdp, abs=0.01)
    assert pld_epsilon(0.0, 20, DELTA) is None and pld_epsilon(1.0, 0, DELTA) is None


def test_the_poisson_approximation():
    approx = poisson_epsilon(1.0, 10 / 100, 100, DELTA)
    unamplified = pld_epsilon(1.0, 100, DELTA)
    assert approx is not None and unamplified is not None and 0 < approx < unamplified
    assert poisson_epsilon(1.0, 1.0, 100, DELTA) == pytest.approx(unamplified, rel=1e-3)  # q = 1: no amplification
    assert poisson_epsilon(0.0, 0.1, 100, DELTA) is None and poisson_epsilon(1.0, 0.1, 0, DELTA) is None
    with pytest.raises(ValueError):
        poisson_epsilon(1.0, 0.0, 10, DELTA)
