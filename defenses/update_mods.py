"""Update-level defenses as a Flower Mod, applied to the device's reply after local training.

``noise`` (seed 001 §7, "random perturbation"): zero-mean Gaussian noise of variance σ² on every
floating-point entry of Δw. ``selective`` (seed 002 §7.3, selective gradient sharing; seed 004 §4.2,
partial sharing): only the fraction θ of each tensor's Δw entries largest in magnitude is sent,
the rest of the tensor stays at the global value. Threat model: the device applies them; the
curious server sees only the defended weights.
"""

from __future__ import annotations

import zlib

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from core.adoption import defenses_of
from core.config import DefenseConfig
from defenses.mod_reply import device_user, keep_global, send, train_config, weights

UPDATE_LEVEL = ("noise", "selective")


def add_noise(weights: np.ndarray, variance: float, rng: np.random.Generator) -> np.ndarray:
    """Noise on Δw is noise on the sent weights; variance 0 returns them untouched."""
    if variance == 0:
        return weights
    return weights + rng.normal(0.0, np.sqrt(variance), size=weights.shape).astype(weights.dtype)


def largest_mask(delta: np.ndarray, share: float) -> np.ndarray:
    """True at the round(θ·size) entries of largest |Δw|."""
    k = int(round(min(share, 1.0) * delta.size))
    mask = np.zeros(delta.shape, bool)
    if k >= delta.size:
        mask[...] = True
    elif k > 0:
        mask.ravel()[np.argpartition(np.abs(delta).ravel(), -k)[-k:]] = True
    return mask


def defend_update(
    global_arrays: dict[str, np.ndarray],
    local_arrays: dict[str, np.ndarray],
    defenses: list[tuple[int, DefenseConfig]],
    seed: int,
) -> dict[str, np.ndarray]:
    """The weights to send after the update-level defenses (entries are never recomputed as g + (l − g))."""
    out = dict(local_arrays)
    for index, defense in defenses:
        rng = np.random.default_rng([seed, index])
        for key, glob in global_arrays.items():
            if not np.issubdtype(glob.dtype, np.floating):
                continue
            if defense.name == "noise":
                out[key] = add_noise(out[key], defense.strength, rng)
            else:
                out[key] = keep_global(out[key], glob, largest_mask(out[key] - glob, defense.strength))
    return out


def update_defense_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Defend the trained weights of the users who adopt an update-level defense; others pass through."""
    reply = call_next(msg, context)
    got = train_config(msg, reply)
    if got is None:
        return reply
    cfg, conf = got
    fed, user = device_user(cfg, conf, context)
    chosen = [(i, d) for i, d in defenses_of(cfg, fed.user_ids, user) if d.name in UPDATE_LEVEL]
    if not chosen:
        return reply
    seed = zlib.crc32(f"{cfg.seed}/{conf['server-round']}/{user}/update-defense".encode())
    return send(reply, defend_update(*weights(msg, reply), chosen, seed))
