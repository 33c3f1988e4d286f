"""Privacy accounting for the DP defenses, with Flower's own accountant (``flwr[dp]``).

Shared ground because the device needs the per-release ε it hands to Flower's ``LocalDpMod`` and
the server reports the ε a run spent. User-level (seed 002 §7.3.4 "participant-level") DP: the
protected unit is one user's whole contribution to a release.
"""

from __future__ import annotations

import math

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
