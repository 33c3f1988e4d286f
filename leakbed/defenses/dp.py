"""Differential privacy on the device, with Flower's own Mods.

``dp-fedavg`` (seed 001 §7 "DP-FedAvg" after McMahan et al. [55]; seed 002 §7.3.4
participant-level DP): each adopting device clips its update Δw to L2 norm ``clip`` with Flower's
``fixedclipping_mod``; the server's ``DifferentialPrivacyClientSideFixedClipping`` wrapper (see
``leakbed/server/dp.py``) adds Gaussian noise of std z·clip/m to the *aggregate* of the m replies it
averages (the privacy audit's canaries included). Threat model: this protects users against whoever sees
only the global models; the curious server itself still sees every clipped individual update (central DP
trusts the aggregator), so clipping is all that stands between it and re-identification.

``local-dp``: each adopting device clips Δw and adds Gaussian noise of std z·clip itself with
Flower's ``LocalDpMod`` (sensitivity = clip, ε = sqrt(2 ln(1.25/δ))/z, δ), so the curious server
only ever sees noised updates.

The noise of both is drawn from the run's noise secret (``core.secret_noise``: 128 bits from the OS, kept by the
referee), never from the experiment seed: whoever holds the config cannot regenerate it and take it off. Flower draws
from NumPy's global generator; it is set to a stream of the secret per round (the server's noise) or per device and
round (a device's) while Flower draws. The privacy row gives Flower's RDP ε (the claim) and the exact ε (PLD).

Both need every model entry to be floating point (Flower clips all arrays, integer buffers
included), see ``defenses.compat``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, Strategy
from flwr.supercore.differential_privacy import compute_clip_model_update
from pydantic import Field

from leakbed.core.privacy import gaussian_epsilon, pld_epsilon, rdp_epsilon
from leakbed.core.secret_noise import global_noise
from leakbed.defenses.contract import Defense, DefenseSetting, DeviceContext, Params, ServerContext

MOD_STAGE = 40  # outermost: it clips (and noises) what every other defense leaves


class DPParams(Params):
    noise_multiplier: float = Field(
        0.5, ge=0.0, le=10_000.0, description="noise multiplier z: Gaussian noise of std z·clip (0 = clipping only) [1]"
    )
    clip: float = Field(50.0, gt=0.0, le=1e6, description="L2 clipping norm of a device's Δw (seed 001 §7: 50) [L2 norm]")
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ at which ε is reported [probability]")


class ClipOnly:
    """z = 0: clip like LocalDpMod, add nothing (LocalDpMod cannot take ε = ∞)."""

    def __init__(self, clip: float) -> None:
        self.clip = clip

    def __call__(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        sent = msg.content.array_records["arrays"]
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        record = reply.content.array_records["arrays"]
        local = record.to_numpy_ndarrays()
        compute_clip_model_update(local, sent.to_numpy_ndarrays(), self.clip)
        reply.content["arrays"] = ArrayRecord({k: Array(np.asarray(v)) for k, v in zip(record.keys(), local, strict=True)})
        return reply


def local_dp_mod(params: DPParams) -> Mod:
    """Flower's LocalDpMod for these parameters (or clipping alone at z = 0)."""
    if params.noise_multiplier == 0:
        return ClipOnly(params.clip)
    return LocalDpMod(params.clip, params.clip, gaussian_epsilon(params.noise_multiplier, params.delta), params.delta)


def seeded(mod: Mod, ctx: DeviceContext) -> Mod:
    """``mod`` drawing its noise (Flower's DP Mods draw from NumPy's global generator) from the plan's noise secret,
    a stream per device, round and defense entry."""

    def run(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        with global_noise(ctx.plan.noise_secret, "device-dp", ctx.round, ctx.user, ctx.index):
            return mod(msg, context, call_next)

    return run


def float_state_only(name: str, setting: DefenseSetting) -> str | None:
    if not setting.float_state:
        return (
            f"{name} clips the whole model with Flower's Mods, which needs floating-point state only; this model has "
            f"integer buffers ({setting.integer_buffer}): use model.name = cnn or an LSTM"
        )
    return None


class SeededDpFixedClipping(DifferentialPrivacyClientSideFixedClipping):
    """Flower's client-side fixed-clipping wrapper with its noise drawn from the noise secret ``secret`` (a stream per
    round; fresh OS entropy when None); counts its releases."""

    def __init__(self, strategy: Strategy, params: DPParams, averaged: int, secret: int | None) -> None:
        super().__init__(strategy, params.noise_multiplier, params.clip, averaged)
        self._secret = secret
        self._round = 0
        self.releases = 0

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        self._round = server_round
        arrays, metrics = super().aggregate_train(server_round, replies)
        self.releases += arrays is not None
        return arrays, metrics

    def _add_noise_to_aggregated_arrays(self, aggregated_arrays: ArrayRecord) -> ArrayRecord:
        with global_noise(self._secret, "dp-fedavg", self._round):
            return super()._add_noise_to_aggregated_arrays(aggregated_arrays)


class DPFedAvg(Defense):
    """Devices clip Δw (Flower's fixedclipping_mod); the server's DP wrapper noises the aggregate."""

    name: ClassVar[str] = "dp-fedavg"
    params = DPParams
    mod_stage = MOD_STAGE
    uniform_weights = True  # the sensitivity z·clip/m of its noise assumes equal weights
    source = "seed 001 §7 (DP-FedAvg, McMahan et al.); seed 002 §7.3.4 (participant-level DP)"
    threat = (
        "whoever sees only the global models; the curious server itself still sees every clipped individual "
        "update (central DP trusts the aggregator)"
    )

    def check(self, params: DPParams, setting: DefenseSetting) -> str | None:
        if setting.secure_aggregation:  # its noise is the server wrapper's
            return (
                "dp-fedavg needs Flower's server-side DP wrapper, which the legacy SecAgg+ workflow does not take; with "
                "fl.secure_aggregation = 'secagg+' use local-dp"
            )
        return float_state_only(self.name, setting)

    def mod(self, ctx: DeviceContext, params: DPParams) -> Mod | None:
        return fixedclipping_mod  # the clipping norm comes in the round's message, from the server's wrapper

    def clip(self, params: DPParams) -> float | None:
        return params.clip

    def wrap_strategy(self, strategy: Strategy, params: DPParams, ctx: ServerContext) -> Strategy:
        return SeededDpFixedClipping(strategy, params, ctx.sampled + ctx.canaries, ctx.noise_secret)

    def privacy(self, params: DPParams, ctx: ServerContext, adopters: int, releases: int) -> dict | None:
        z, c, m, users = params.noise_multiplier, params.clip, ctx.sampled, len(ctx.users)
        averaged = m + ctx.canaries  # the replies the wrapper averages and calibrates its noise to
        row = {"noise_multiplier": z, "clip": c, "delta": params.delta, "adopters": adopters, "sampled_per_round": m,
               "averaged_per_round": averaged, "releases": releases, "noise_std_on_average": z * c / averaged}  # fmt: skip
        guaranteed = adopters == users
        row["epsilon"] = rdp_epsilon(z, m, users, releases, params.delta) if guaranteed else None
        row["epsilon_exact"] = pld_epsilon(z, releases, params.delta) if guaranteed else None
        row["accountant"] = ("flwr RdpAccountant: user level, add-or-remove-one, no sampling amplification; exact: "
                             "dp_accounting's PLD accountant")  # fmt: skip
        if adopters < users:
            row["note"] = "not every device clips: no user-level guarantee"
        elif z == 0:
            row["note"] = "noise multiplier 0: clipping only, no guarantee"
        return row


class LocalDP(Defense):
    """Devices clip Δw and add Gaussian noise of std z·clip themselves (Flower's LocalDpMod)."""

    name: ClassVar[str] = "local-dp"
    params = DPParams
    mod_stage = MOD_STAGE
    source = "seed 002 §7.3.4 (participant-level DP, local form)"
    threat = "the curious server: it only ever sees noised updates"

    def check(self, params: DPParams, setting: DefenseSetting) -> str | None:
        return float_state_only(self.name, setting)

    def mod(self, ctx: DeviceContext, params: DPParams) -> Mod | None:
        return seeded(local_dp_mod(params), ctx)

    def clip(self, params: DPParams) -> float | None:
        return params.clip

    def privacy(self, params: DPParams, ctx: ServerContext, adopters: int, releases: int) -> dict | None:
        z, c = params.noise_multiplier, params.clip
        per_release = gaussian_epsilon(z, params.delta)
        row = {
            "noise_multiplier": z, "clip": c, "delta": params.delta, "adopters": adopters, "noise_std_on_update": z * c,
            "epsilon_per_release": per_release if math.isfinite(per_release) else None,
            # a user is sampled at most once a round: T releases bound its composition
            "epsilon": rdp_epsilon(z, 1, 1, ctx.rounds, params.delta),
            "epsilon_exact": pld_epsilon(z, ctx.rounds, params.delta),
            "accountant": "per release: Gaussian mechanism bound (LocalDpMod); over all rounds: flwr RdpAccountant; "
            "exact: dp_accounting's PLD accountant",
        }  # fmt: skip
        if z == 0:
            row["note"] = "noise multiplier 0: clipping only, no guarantee"
        return row
