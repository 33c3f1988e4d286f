"""Empirical privacy audit of user-level DP-FedAvg from canary clients: the math only.

k canary clients each hold a secret random unit direction c_j in R^d. Each canary is inserted
independently with probability 1/2; an inserted canary's update is c_j scaled to the clipping norm,
averaged with the real clients' updates, and DP-FedAvg adds its Gaussian noise. The auditor sees every
round's model delta Δ_t and scores each canary by how much the released model points along c_j: the
final model's cos(c_j, Σ_t Δ_t) (``cosines`` of the summed delta) or the all-iterates statistic
Σ_t cos(c_j, Δ_t) (``all_iterates_statistic``). Canaries that were never inserted give the null
distribution. Two estimates are made from the scores:

- ``andrew_epsilon``: Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy
  Estimation for Federated Learning", ICLR 2024, §3–4: fit a Gaussian to the inserted canaries'
  statistics and one to the held-out canaries', and report the ε at δ of the privacy curve between
  the two Gaussians (``gaussian_pair_epsilon``). An estimate, not a bound: it assumes the statistics
  are Gaussian.
- ``steinke_lower_bound``: Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run",
  NeurIPS 2023, Theorem 3 and its δ > 0 extension (Prop. 5.x): guess which canaries were inserted from
  their scores; if the mechanism were (ε, δ)-DP, many correct guesses would be unlikely
  (``steinke_p_value``), so the largest ε rejected at the given confidence is a statistically valid
  lower bound on the ε the run really has. It requires the independent inclusion ``inserted_mask``
  draws.

``amplified_epsilon`` is the accountant's upper bound to hold those against.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting import rdp
from scipy import stats
from scipy.special import expit

EPS_CEILING = 1000.0  # gaussian_pair_epsilon: an ε whose δ(ε) is still above δ here counts as unreachable (∞)
LOWER_BOUND_CEILING = 100.0  # steinke_lower_bound searches ε in [0, 100]


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
    no null or no signal set and ``andrew_epsilon`` refuses it), not re-drawn, since re-drawing on the
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


def all_iterates_statistic(per_round: np.ndarray) -> np.ndarray:
    """The all-iterates statistic from (T, k) per-round cosines cos(c_j, Δ_t): their sum over rounds, (k,).

    Why the sum and not Andrew et al.'s max over rounds: a canary inserted every round adds a fixed a·c_j
    to each Δ_t under (nearly) isotropic Gaussian noise, so by Neyman–Pearson the most powerful test of
    "inserted" is linear in Σ_t <c_j, Δ_t>; the cosine divides by ‖Δ_t‖, which is noise-dominated and
    nearly constant over rounds in high dimension. The sum of T such rounds is again Gaussian with
    signal-to-noise sqrt(T) times one round's, exactly the composition of T Gaussian mechanisms, so the
    Gaussian fit of ``andrew_epsilon`` stays apt; the max of T Gaussians has Gumbel-like tails a Gaussian
    fit misdescribes. The max has more power only when a canary appears in one or a few unknown rounds.
    """
    per_round = np.asarray(per_round, dtype=np.float64)
    if per_round.ndim != 2:
        raise ValueError(f"per_round must be (rounds, canaries), got shape {per_round.shape}")
    return per_round.sum(axis=0)


def _log_mass(mu: float, sigma: float, lo: float, hi: float) -> float:
    """log P[lo < X < hi] for X ~ N(mu, sigma²), stable in either tail (lo, hi may be ±inf)."""
    a, b = (lo - mu) / sigma, (hi - mu) / sigma
    if not a < b:
        return -math.inf
    if a > 0:  # both in the upper tail: difference of survival functions
        la, lb = float(stats.norm.logsf(a)), float(stats.norm.logsf(b))
    else:  # b <= 0 or straddling 0: difference of CDFs (straddling: both logs are well away from -inf)
        lb, la = float(stats.norm.logcdf(a)), float(stats.norm.logcdf(b))
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


def _pair_delta(eps: float, mu0: float, sigma0: float, mu1: float, sigma1: float) -> float:
    """δ(ε) of the pair by the exact interval integral, max over both orders (any sigmas > 0)."""
    return max(_hockey_stick(eps, mu0, sigma0, mu1, sigma1), _hockey_stick(eps, mu1, sigma1, mu0, sigma0))


def _gdp_delta(eps: float, mu: float) -> float:
    """Balle & Wang (2018)'s δ(ε) of the Gaussian mechanism at μ: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),
    evaluated in log space for large ε."""
    if mu == 0:
        return 0.0
    l1 = float(stats.norm.logcdf(-eps / mu + mu / 2))
    l2 = float(stats.norm.logcdf(-eps / mu - mu / 2)) + eps
    return max(0.0, -math.expm1(l2 - l1) * math.exp(l1)) if l2 < l1 else 0.0


def _smallest_eps(delta_of, delta: float) -> float:
    """The smallest ε >= 0 with delta_of(ε) <= delta for a non-increasing delta_of, by bisection."""
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


def gaussian_pair_epsilon(mu0: float, sigma0: float, mu1: float, sigma1: float, delta: float) -> float:
    """ε at δ of the privacy curve between N(mu0, sigma0²) and N(mu1, sigma1²), the max over both orders of
    δ(ε) = ∫ max(0, p_a − e^ε p_b) dx: the smallest ε >= 0 with δ(ε) <= delta (bisection); 0.0 when δ(0) is
    already <= delta, math.inf when not reached below ε = 1000.

    Equal sigmas: the Gaussian mechanism's closed form at μ = |mu1 − mu0|/σ. Unequal sigmas: the region
    p_a > e^ε p_b is a quadratic inequality in x, so δ(ε) is exact as normal-CDF differences over at most
    two intervals. A zero sigma (a point mass) is ∞ apart from anything but the same point mass."""
    values = (mu0, sigma0, mu1, sigma1, delta)
    if not all(math.isfinite(v) for v in values) or sigma0 < 0 or sigma1 < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need finite means, sigmas >= 0 and 0 <= delta <= 1, got {values}")
    if sigma0 == 0 or sigma1 == 0:
        return 0.0 if (sigma0 == sigma1 and mu0 == mu1) or delta >= 1 else math.inf
    if sigma0 == sigma1:
        mu = abs(mu1 - mu0) / sigma0
        return _smallest_eps(lambda eps: _gdp_delta(eps, mu), delta)
    return _smallest_eps(lambda eps: _pair_delta(eps, mu0, sigma0, mu1, sigma1), delta)


def andrew_epsilon(inserted: np.ndarray, held_out: np.ndarray, delta: float) -> float:
    """Andrew et al.'s one-shot ε estimate: a Gaussian (mean, std with ddof=1) fitted to the inserted
    canaries' statistics and one to the held-out canaries', and the ε at δ between the two."""
    ins = np.asarray(inserted, dtype=np.float64).ravel()
    out = np.asarray(held_out, dtype=np.float64).ravel()
    if ins.size < 2 or out.size < 2:
        raise ValueError(f"need at least 2 inserted and 2 held-out statistics, got {ins.size} and {out.size}")
    return gaussian_pair_epsilon(float(out.mean()), float(out.std(ddof=1)), float(ins.mean()), float(ins.std(ddof=1)), delta)


def steinke_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Steinke et al.'s p-value of at least v correct guesses out of r among m canaries if the mechanism
    were (ε, δ)-DP: each guess is at best randomized response, right with probability q = e^ε/(1+e^ε), so
    β = P[Binomial(r, q) >= v]; δ adds 2·m·δ·α with α = max over i = 1..v of P[v−i <= Binomial(r, q) < v]/i.
    Returns min(1, β + 2mδα)."""
    if not (0 <= v <= r <= m and epsilon >= 0 and 0 <= delta <= 1):
        raise ValueError(f"need 0 <= v <= r <= m, epsilon >= 0, 0 <= delta <= 1; got {m, r, v, epsilon, delta}")
    q = float(expit(epsilon))
    beta = float(stats.binom.sf(v - 1, r, q))
    if v == 0:
        return min(1.0, beta)
    below = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[B = v−1], P[B = v−2], …, P[B = 0]
    alpha = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))  # i-th entry: P[v−i <= B < v] / i
    return min(1.0, beta + 2 * m * delta * alpha)


def steinke_lower_bound(
    scores: np.ndarray, inserted: np.ndarray, delta: float, confidence: float = 0.95, guesses: int | None = None
) -> dict:
    """Steinke et al.'s one-run lower bound on ε from canary scores and the true inclusion mask.

    Canaries are ranked by score (ties in index order); the top guesses//2 are guessed "inserted", the
    bottom guesses//2 "held out", the rest abstained on. Default r = m//2 rounded down to even: abstain on
    the middle half, where the guesses are least reliable; fixed before looking at the outcome, as the
    bound requires (choosing r by its result would need a correction for the multiple tries). v correct
    guesses reject (ε, δ)-DP when ``steinke_p_value`` <= 1 − confidence; the largest such ε in [0, 100]
    (bisection; 0.0 when not even ε = 0 is rejected) is the bound, valid with probability ``confidence``.
    """
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
        guesses = (m // 2) // 2 * 2
    if not 0 <= guesses <= m:
        raise ValueError(f"guesses must be in [0, {m}], got {guesses}")
    half = guesses // 2
    r = 2 * half
    order = np.argsort(-scores, kind="stable")
    v = int(inserted[order[:half]].sum() + (~inserted[order[m - half :]]).sum()) if half else 0
    threshold = 1 - confidence

    def rejected(eps: float) -> bool:
        return steinke_p_value(m, r, v, eps, delta) <= threshold

    if r == 0 or not rejected(0.0):
        eps_lb = 0.0
    elif rejected(LOWER_BOUND_CEILING):
        eps_lb = LOWER_BOUND_CEILING
    else:
        lo, hi = 0.0, LOWER_BOUND_CEILING  # invariant: lo rejected, hi not
        while hi - lo > 1e-6:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
        eps_lb = lo  # the rejected end: conservative
    return {"epsilon": eps_lb, "guesses": r, "correct": v, "canaries": m, "confidence": confidence}


def amplified_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> float | None:
    """ε after ``rounds`` Poisson-subsampled Gaussian rounds at rate q and noise multiplier z, by
    dp_accounting's RDP accountant (add-or-remove-one): the amplification-by-sampling upper bound to set
    an audit against. Flower samples a fixed count m of N clients per round, so this is the Poisson
    approximation at q = m/N. None without noise or without rounds (no finite guarantee)."""
    if noise_multiplier <= 0 or rounds <= 0:
        return None
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    accountant = rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
    accountant.compose(event, rounds)
    return float(accountant.get_epsilon(delta))
