"""Differential privacy on the device, with Flower's own Mods.

``dp-fedavg`` (seed 001 §7 "DP-FedAvg" after McMahan et al. [55]; seed 002 §7.3.4
participant-level DP): each adopting device clips its update Δw to L2 norm ``clip`` with Flower's
``fixedclipping_mod``; the server's ``DifferentialPrivacyClientSideFixedClipping`` wrapper (see
``server/dp.py``) adds Gaussian noise of std z·clip/m to the *aggregate*. Threat model: this
protects users against whoever sees only the global models; the curious server itself still
sees every clipped individual update (central DP trusts the aggregator), so clipping is all that
stands between it and re-identification.

``local-dp``: each adopting device clips Δw and adds Gaussian noise of std z·clip itself with
Flower's ``LocalDpMod`` (sensitivity = clip, ε = sqrt(2 ln(1.25/δ))/z, δ), so the curious server
only ever sees noised updates. Flower draws that noise from NumPy's global generator; it is
seeded per user and round here so the same seed gives the same numbers.

Both need every model entry to be floating point (Flower clips all arrays, integer buffers
included), see ``defenses.compat``.
"""

from __future__ import annotations

import zlib

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.supercore.differential_privacy import compute_clip_model_update

from core.config import DefenseConfig
from core.privacy import gaussian_epsilon
from defenses.mod_reply import adopted

DP_LEVEL = ("dp-fedavg", "local-dp")


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


def local_dp_mod(defense: DefenseConfig):
    """Flower's LocalDpMod for this defense (or clipping alone at z = 0)."""
    if defense.strength == 0:
        return ClipOnly(defense.clip)
    return LocalDpMod(defense.clip, defense.clip, gaussian_epsilon(defense.strength, defense.delta), defense.delta)


def dp_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Apply the DP defenses this device's user adopts; the outermost Mod, so it clips what is sent."""
    found = adopted(msg, context, DP_LEVEL)
    if found is None:
        return call_next(msg, context)
    cfg, conf, user, chosen = found
    chain = call_next
    for defense in reversed(chosen):
        if defense.name == "dp-fedavg":
            chain = _bind(fixedclipping_mod, chain)
        elif defense.name == "local-dp":
            chain = _bind(local_dp_mod(defense), chain)
    if chain is call_next:
        return call_next(msg, context)
    state = np.random.get_state()
    np.random.seed(zlib.crc32(f"{cfg.seed}/{conf['server-round']}/{user}/dp".encode()))
    try:
        return chain(msg, context)
    finally:
        np.random.set_state(state)


def _bind(mod, call_next: ClientAppCallable) -> ClientAppCallable:
    return lambda m, c: mod(m, c, call_next)
