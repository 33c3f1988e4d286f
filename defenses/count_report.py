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

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from core.config import DefenseConfig
from defenses.dp import ClipOnly
from defenses.mod_reply import adopted, train_config

METADATA_LEVEL = ("count-bucket", "count-constant", "norm-clip")


def reported_count(n: int, defenses: list[DefenseConfig]) -> int:
    """The example count the device reports after its count defenses (the last one decides)."""
    out = n
    for d in defenses:
        if d.name == "count-constant":
            out = 1
        elif d.name == "count-bucket":
            out = 2 ** round(math.log2(max(out, 1)))
    return int(out)


def metadata_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Clip Δw (norm-clip) and rewrite ``num-examples`` (count-bucket / count-constant) for adopting users."""
    found = adopted(msg, context, METADATA_LEVEL)
    if found is None:
        return call_next(msg, context)
    chosen = found[3]
    clip = next((d for d in reversed(chosen) if d.name == "norm-clip"), None)
    reply = ClipOnly(clip.clip)(msg, context, call_next) if clip else call_next(msg, context)
    if train_config(msg, reply) is None:
        return reply
    counts = [d for d in chosen if d.name != "norm-clip"]
    if counts:
        metrics = reply.content.metric_records["metrics"]
        metrics["num-examples"] = reported_count(int(metrics["num-examples"]), counts)
    return reply
