"""The server half of ``dp-fedavg`` and the privacy accounting of both DP defenses.

Seed 001 §7 (DP-FedAvg [55]) and seed 002 §7.3.4 (participant-level DP). The curious FedAvg is
wrapped in Flower's ``DifferentialPrivacyClientSideFixedClipping``: it sends the clipping norm to
the devices (their ``fixedclipping_mod`` clips, see ``defenses/dp.py``), lets the inner strategy
tap and average the clipped updates, then adds Gaussian noise of std z·clip/m to the average.
The wrapper's noise comes from NumPy's global generator; it is seeded per round here.

ε is computed with Flower's own RDP accountant (``flwr[dp]``, Google's dp-accounting). Flower
only lets the wrapper account around an un-overridden ``FedAvg.aggregate_train``; ours is
overridden (it taps), so the same accountant is driven here, in the mode the wrapper would use:
no amplification by sampling, add-or-remove-one user, one Gaussian release per aggregated round.
The sensitivity z·clip/m assumes equal weights, so a dp-fedavg run averages uniformly. As in
Flower, a round with any failed reply is skipped whole (no aggregate, no tap, no release).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, Strategy

from core.adoption import adopters
from core.config import DefenseConfig, ExperimentConfig
from core.privacy import gaussian_epsilon, rdp_epsilon


class SeededDpFixedClipping(DifferentialPrivacyClientSideFixedClipping):
    """Flower's client-side fixed-clipping wrapper with reproducible noise; counts its releases."""

    def __init__(self, strategy: Strategy, defense: DefenseConfig, sampled: int, seed: int) -> None:
        super().__init__(strategy, defense.strength, defense.clip, sampled)
        self._seed = seed
        self._round = 0
        self.releases = 0

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        self._round = server_round
        arrays, metrics = super().aggregate_train(server_round, replies)
        self.releases += arrays is not None
        return arrays, metrics

    def _add_noise_to_aggregated_arrays(self, aggregated_arrays: ArrayRecord) -> ArrayRecord:
        state = np.random.get_state()
        np.random.seed(zlib.crc32(f"{self._seed}/{self._round}/dp-fedavg".encode()))
        try:
            return super()._add_noise_to_aggregated_arrays(aggregated_arrays)
        finally:
            np.random.set_state(state)


def dp_fedavg_defense(cfg: ExperimentConfig) -> DefenseConfig | None:
    return next((d for d in cfg.defenses if d.name == "dp-fedavg"), None)


def sampled_per_round(cfg: ExperimentConfig, users: int) -> int:
    """m: the devices CuriousFedAvg samples each round (its sampler's rule)."""
    return min(users, max(int(users * cfg.fl.fraction_train), 1))


def wrap_dp(strategy: Strategy, cfg: ExperimentConfig, users: int) -> Strategy:
    """The strategy to start: the DP wrapper around ``strategy`` when dp-fedavg is configured."""
    defense = dp_fedavg_defense(cfg)
    if defense is None:
        return strategy
    return SeededDpFixedClipping(strategy, defense, sampled_per_round(cfg, users), cfg.seed)


def privacy_summary(cfg: ExperimentConfig, user_ids: list[str], releases: int) -> list[dict]:
    """ε, δ, noise multiplier and clip norm of every DP defense of the run (for metrics.json)."""
    out = []
    users = len(user_ids)
    for index, d in enumerate(cfg.defenses):
        if d.name not in ("dp-fedavg", "local-dp"):
            continue
        n_adopt = len(adopters(d, index, user_ids, cfg.seed))
        row = {"defense": d.name, "noise_multiplier": d.strength, "clip": d.clip, "delta": d.delta, "adopters": n_adopt}
        if d.name == "dp-fedavg":
            m = sampled_per_round(cfg, users)
            row |= {"sampled_per_round": m, "releases": releases, "noise_std_on_average": d.strength * d.clip / m}
            row["epsilon"] = rdp_epsilon(d.strength, m, users, releases, d.delta) if n_adopt == users else None
            row["accountant"] = "flwr RdpAccountant: user level, add-or-remove-one, no sampling amplification"
            if n_adopt < users:
                row["note"] = "not every device clips: no user-level guarantee"
            elif d.strength == 0:
                row["note"] = "noise multiplier 0: clipping only, no guarantee"
        else:
            per_release = gaussian_epsilon(d.strength, d.delta)
            row |= {
                "noise_std_on_update": d.strength * d.clip,
                "epsilon_per_release": per_release if math.isfinite(per_release) else None,
                # a user is sampled at most once a round: T releases bound its composition
                "epsilon": rdp_epsilon(d.strength, 1, 1, cfg.fl.rounds, d.delta),
                "accountant": "per release: Gaussian mechanism bound (LocalDpMod); over all rounds: flwr RdpAccountant",
            }
            if d.strength == 0:
                row["note"] = "noise multiplier 0: clipping only, no guarantee"
        out.append(row)
    return out
