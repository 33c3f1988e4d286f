"""Metadata defenses, per user, as one Flower Mod on the device's reply (what ``attacks.metadata`` and
``attacks.linkage`` read besides the weights; seed 001 §3 assumes a shuffler strips such metadata,
these keep the device from sending it in the first place).

- ``count-bucket``: the device reports its example count rounded to the nearest power of two
  (in log scale). FedAvg still weights by size, up to a factor of √2.
- ``count-constant``: the device reports 1 whatever its size, so FedAvg weights every update equally
  (the server needs no change: uniform reports are uniform weights).
- ``norm-clip``: the device clips its Δw to L2 norm ``clip`` with Flower's clipping
  (``defenses.dp``'s clip-only Mod, ``compute_clip_model_update``): with ``clip`` below the users'
  update norms every update arrives at the same norm, which hides the norm and with it the number of
  local steps (hence the data size) it betrays.

Threat model: the device applies them; the curious server sees only the reported count and the
clipped weights. Nothing here changes which examples the device trains on.
"""

from __future__ import annotations

import math
from typing import ClassVar

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable, Mod
from pydantic import Field

from leakbed.defenses.contract import Defense, DefenseSetting, DeviceContext, NoParams, Params
from leakbed.defenses.dp import ClipOnly, float_state_only
from leakbed.defenses.mod_reply import is_train_reply

MOD_STAGE = 30  # on what the update-level defenses leave, inside differential privacy
SOURCE = "issue 12 (leakbed): what seed 001 §3's shuffler leaves, kept from being sent"


def bucketed(n: int) -> int:
    """The example count rounded to the nearest power of two (in log scale)."""
    return int(2 ** round(math.log2(max(n, 1))))


def count_mod(report) -> Mod:  # noqa: ANN001 - int -> int
    """A Mod that rewrites a train reply's ``num-examples`` to ``report(n)``."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        if is_train_reply(msg, reply):
            metrics = reply.content.metric_records["metrics"]
            metrics["num-examples"] = report(int(metrics["num-examples"]))
        return reply

    return mod


class CountBucket(Defense):
    """The device reports its example count rounded to the nearest power of two: FedAvg still weights by size,
    up to a factor of √2."""

    name: ClassVar[str] = "count-bucket"
    params = NoParams
    mod_stage = MOD_STAGE
    source = SOURCE
    threat = "the curious server: it sees a bucketed count, not the device's data size"

    def mod(self, ctx: DeviceContext, params: NoParams) -> Mod | None:
        return count_mod(bucketed)


class CountConstant(Defense):
    """The device reports 1 whatever its size, so FedAvg weights every update equally."""

    name: ClassVar[str] = "count-constant"
    params = NoParams
    mod_stage = MOD_STAGE
    source = SOURCE
    threat = "the curious server: every count it sees is 1"

    def mod(self, ctx: DeviceContext, params: NoParams) -> Mod | None:
        return count_mod(lambda _n: 1)


class NormClipParams(Params):
    clip: float = Field(50.0, gt=0.0, le=1e6, description="L2 norm a device's Δw is clipped to [L2 norm]")


class NormClip(Defense):
    """The device clips its Δw to L2 norm ``clip`` with Flower's clipping: below the users' update norms every
    update arrives at the same norm, which hides the norm and with it the number of local steps it betrays."""

    name: ClassVar[str] = "norm-clip"
    params = NormClipParams
    mod_stage = MOD_STAGE
    source = SOURCE
    threat = "the curious server: every update it sees has the same norm"

    def check(self, params: NormClipParams, setting: DefenseSetting) -> str | None:
        return float_state_only(self.name, setting)

    def mod(self, ctx: DeviceContext, params: NormClipParams) -> Mod | None:
        return ClipOnly(params.clip)
