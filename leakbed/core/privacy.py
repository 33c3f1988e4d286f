"""Privacy accounting for the DP defenses: Flower's RDP accountant (``flwr[dp]``), and dp_accounting's exact one.

Shared ground because the device needs the per-release ε it hands to Flower's ``LocalDpMod``, the server reports the
ε a run spent, and the audit holds its estimates against both. User-level (seed 002 §7.3.4 "participant-level") DP:
the protected unit is one user's whole contribution to a release.

- ``rdp_epsilon``: what Flower's fixed-clipping wrappers account (Rényi DP, no amplification): an upper bound, a little
  loose (30.13 for 20 releases at z = 1, δ = 1e-5).
- ``pld_epsilon``: the same mechanism's exact ε by dp_accounting's privacy-loss-distribution accountant (28.37 there).
- ``poisson_epsilon``: with amplification by Poisson sampling at rate q (PLD). Flower samples a fixed count of devices each
  round, for which no such figure is a bound: it is an approximation, named so wherever it is shown.
"""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import pld
from flwr.supercore.privacy_accounting import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, SamplingMethod
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε of one Gaussian release of std z·sensitivity: the classical bound sqrt(2 ln(1.25/δ))/z that
    ``LocalDpMod`` inverts (strictly valid for ε < 1); ∞ without noise."""
    return math.sqrt(2 * math.log(1.25 / delta)) / noise_multiplier if noise_multiplier > 0 else math.inf


def rdp_epsilon(noise_multiplier: float, sample: int, population: int, releases: int, delta: float) -> float | None:
    """ε after ``releases`` Gaussian releases of noise multiplier z by Flower's RDP accountant, in the
    mode Flower's fixed-clipping wrappers account in (no amplification by sampling, add-or-remove-one);
    None when there is no noise or no release (no finite guarantee)."""
    if noise_multiplier <= 0 or releases <= 0:
        return None
    acc = RdpAccountant(PrivacyConfig(delta, population, NeighboringRelation.ADD_OR_REMOVE_ONE, SamplingMethod.NO_AMPLIFICATION))
    acc.compose(GaussianPrivacyEvent(noise_multiplier, sample, population), releases)
    eps = acc.get_privacy_spent().epsilon
    return eps if math.isfinite(eps) else None


def pld_epsilon(noise_multiplier: float, releases: int, delta: float) -> float | None:
    """The exact ε of ``releases`` Gaussian releases of noise multiplier z (add-or-remove-one, no amplification) by
    dp_accounting's PLD accountant; None without noise or releases. T Gaussians of sensitivity 1 compose exactly into
    one of sensitivity sqrt(T), so one event of noise z/sqrt(T) is accounted (its discretisation, coarser for large
    ε, errs upward by at most ``value_discretization_interval``)."""
    if noise_multiplier <= 0 or releases <= 0:
        return None
    z = noise_multiplier / math.sqrt(releases)
    accountant = pld.PLDAccountant(value_discretization_interval=1e-3 * max(1.0, 1 / (20 * z * z)))
    accountant.compose(dp_accounting.GaussianDpEvent(z))
    eps = float(accountant.get_epsilon(delta))
    return eps if math.isfinite(eps) else None


def poisson_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> float | None:
    """ε after ``rounds`` Poisson-subsampled Gaussian rounds at rate q and noise multiplier z, by dp_accounting's PLD
    accountant (add-or-remove-one). For Flower's fixed-count sampling of m of N devices at q = m/N it is an
    approximation, not a bound. None without noise or without rounds (no finite guarantee)."""
    if noise_multiplier <= 0 or rounds <= 0:
        return None
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    accountant = pld.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)), rounds)
    eps = float(accountant.get_epsilon(delta))
    return eps if math.isfinite(eps) else None
