"""``broken-dp-fedavg``: DP-FedAvg's claim at the stated ``clip`` and ``noise_multiplier``, a weaker mechanism in fact.

The server half is Flower's ``DifferentialPrivacyClientSideFixedClipping`` with ``noise_scale`` times the stated
noise multiplier; the device half clips Δw to ``clip_scale`` times the stated norm (its own Mod, ignoring the norm the
wrapper sends). The privacy row accounts the *stated* mechanism (Flower's RDP accountant, and the exact ε by
dp_accounting's PLD), so the run claims a guarantee it does not have: the audit must flag it.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting import pld
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, Strategy
from flwr.supercore.differential_privacy import compute_clip_model_update
from flwr.supercore.privacy_accounting import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, SamplingMethod
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant
from pydantic import Field

from leakbed.plugin import Defense, DefenseSetting, DeviceContext, Params, ServerContext


class BrokenParams(Params):
    noise_multiplier: float = Field(1.0, gt=0.0, le=1e4, description="the stated noise multiplier z [1]")
    clip: float = Field(0.5, gt=0.0, le=1e6, description="the stated L2 clipping norm of a device's Δw [L2 norm]")
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ at which ε is stated [probability]")
    noise_scale: float = Field(1.0, ge=0.0, le=1e3, description="noise added, as a share of the stated noise [ratio]")
    clip_scale: float = Field(1.0, gt=0.0, le=1e6, description="norm devices clip to, over the stated norm [ratio]")


def clip_mod(norm: float) -> Mod:
    """A device Mod that clips a train reply's Δw to L2 norm ``norm``."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        sent = msg.content.array_records["arrays"]
        reply = call_next(msg, context)
        if reply.has_error() or msg.metadata.message_type != "train":
            return reply
        record = reply.content.array_records["arrays"]
        local = record.to_numpy_ndarrays()
        compute_clip_model_update(local, sent.to_numpy_ndarrays(), norm)
        reply.content["arrays"] = ArrayRecord({k: Array(np.asarray(v)) for k, v in zip(record.keys(), local, strict=True)})
        return reply

    return mod


@contextlib.contextmanager
def _secret_stream(secret: int | None, rnd: int) -> Iterator[None]:
    """NumPy's global generator (Flower draws its noise there) seeded from the run's noise secret and the round."""
    state = np.random.get_state()
    seq = np.random.SeedSequence(secret, spawn_key=(zlib.crc32(b"broken-dp-fedavg"), rnd))
    np.random.set_state(np.random.RandomState(np.random.MT19937(seq)).get_state())
    try:
        yield
    finally:
        np.random.set_state(state)


class WeakNoise(DifferentialPrivacyClientSideFixedClipping):
    """Flower's wrapper at the noise multiplier it is given; counts its releases."""

    def __init__(self, strategy: Strategy, z: float, clip: float, averaged: int, secret: int | None) -> None:
        super().__init__(strategy, z, clip, averaged)
        self._secret, self._round = secret, 0

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        self._round = server_round
        return super().aggregate_train(server_round, replies)

    def _add_noise_to_aggregated_arrays(self, aggregated_arrays: ArrayRecord) -> ArrayRecord:
        with _secret_stream(self._secret, self._round):
            return super()._add_noise_to_aggregated_arrays(aggregated_arrays)


def stated_epsilons(z: float, sampled: int, users: int, releases: int, delta: float) -> tuple[float, float]:
    """(Flower's RDP ε, the exact PLD ε) of ``releases`` Gaussian releases at noise multiplier z: what it claims."""
    rdp = RdpAccountant(PrivacyConfig(delta, users, NeighboringRelation.ADD_OR_REMOVE_ONE, SamplingMethod.NO_AMPLIFICATION))
    rdp.compose(GaussianPrivacyEvent(z, sampled, users), releases)
    exact = pld.PLDAccountant(value_discretization_interval=1e-3)
    exact.compose(dp_accounting.GaussianDpEvent(z / math.sqrt(releases)))
    return float(rdp.get_privacy_spent().epsilon), float(exact.get_epsilon(delta))


class BrokenDpFedAvg(Defense[BrokenParams]):
    """States DP-FedAvg at (clip, z); clips at clip_scale·clip and adds noise_scale·z·clip/m."""

    name: ClassVar[str] = "broken-dp-fedavg"
    mod_stage = 40  # outermost, as dp-fedavg's
    uniform_weights = True
    source = "leakbed-broken-dp: the privacy audit's adversary (a defense from outside the project)"
    threat = "claims user-level DP against readers of the global models; delivers less on purpose"

    def check(self, params: BrokenParams, setting: DefenseSetting) -> str | None:
        if not setting.float_state:
            return f"broken-dp-fedavg clips the whole model: integer buffers ({setting.integer_buffer}) are not allowed"
        if setting.secure_aggregation:
            return "broken-dp-fedavg needs Flower's server-side DP wrapper, which SecAgg+ does not take"
        return None

    def mod(self, ctx: DeviceContext, params: BrokenParams) -> Mod | None:
        return clip_mod(params.clip * params.clip_scale)

    def clip(self, params: BrokenParams) -> float | None:
        return params.clip  # the stated norm

    def wrap_strategy(self, strategy: Strategy, params: BrokenParams, ctx: ServerContext) -> Strategy:
        z = params.noise_multiplier * params.noise_scale
        return WeakNoise(strategy, z, params.clip, ctx.sampled + ctx.canaries, ctx.noise_secret)

    def privacy(self, params: BrokenParams, ctx: ServerContext, adopters: int, releases: int) -> dict[str, Any] | None:
        z, c, m, users = params.noise_multiplier, params.clip, ctx.sampled, len(ctx.users)
        row = {"noise_multiplier": z, "clip": c, "delta": params.delta, "adopters": adopters, "sampled_per_round": m,
               "averaged_per_round": m + ctx.canaries, "releases": releases,
               "noise_std_on_average": z * c / (m + ctx.canaries), "epsilon": None, "epsilon_exact": None,
               "accountant": "stated mechanism: flwr RdpAccountant (no amplification); exact: dp_accounting PLD"}  # fmt: skip
        if adopters == users and releases > 0:
            row["epsilon"], row["epsilon_exact"] = stated_epsilons(z, m, users, releases, params.delta)
        return row
