"""Update-level defenses as a Flower Mod, applied to the device's reply after local training.

``noise`` (seed 001 §7, "random perturbation"): zero-mean Gaussian noise of variance σ² on every
floating-point entry of Δw. ``selective`` (seed 002 §7.3, selective gradient sharing; seed 004 §4.2,
partial sharing): only the fraction θ of each tensor's Δw entries largest in magnitude is sent,
the rest of the tensor stays at the global value. Threat model: the device applies them; the
curious server sees only the defended weights.
"""

from __future__ import annotations

import zlib
from typing import ClassVar

import numpy as np
from flwr.clientapp.typing import Mod
from pydantic import Field

from leakbed.defenses.contract import Defense, DeviceContext, Params
from leakbed.defenses.mod_reply import keep_global, reply_mod


class NoiseParams(Params):
    variance: float = Field(0.5, ge=0.0, le=10_000.0, description="variance σ² of the Gaussian noise on each Δw entry [1]")


class SelectiveParams(Params):
    share: float = Field(0.5, ge=0.0, le=1.0, description="share θ of each tensor's Δw entries sent, the largest [fraction]")


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


def update_rng(ctx: DeviceContext) -> np.random.Generator:
    """The generator of this entry's draws on this device in this round."""
    seed = zlib.crc32(f"{ctx.plan.seed}/{ctx.round}/{ctx.user}/update-defense".encode())
    return np.random.default_rng([seed, ctx.index])


def noise(glob: dict[str, np.ndarray], local: dict[str, np.ndarray], variance: float, rng: np.random.Generator) -> dict:
    """The weights to send with Gaussian noise on every floating-point entry (never recomputed as g + (l − g))."""
    out = dict(local)
    for key, g in glob.items():
        if np.issubdtype(g.dtype, np.floating):
            out[key] = add_noise(out[key], variance, rng)
    return out


def selective(glob: dict[str, np.ndarray], local: dict[str, np.ndarray], share: float) -> dict:
    """The weights to send with only the share θ of each tensor's largest |Δw| entries, the rest at the global value."""
    out = dict(local)
    for key, g in glob.items():
        if np.issubdtype(g.dtype, np.floating):
            out[key] = keep_global(out[key], g, largest_mask(out[key] - g, share))
    return out


class Noise(Defense):
    name: ClassVar[str] = "noise"
    params = NoiseParams
    source = "seed 001 §7 (random perturbation)"
    threat = "the curious server: it sees only the noised weights"

    def mod(self, ctx: DeviceContext, params: NoiseParams) -> Mod | None:
        rng = update_rng(ctx)
        return reply_mod(lambda glob, local: noise(glob, local, params.variance, rng))


class Selective(Defense):
    name: ClassVar[str] = "selective"
    params = SelectiveParams
    source = "seed 002 §7.3 (selective gradient sharing); seed 004 §4.2 (partial sharing)"
    threat = "the curious server: it sees only the shared share of each tensor's Δw"

    def mod(self, ctx: DeviceContext, params: SelectiveParams) -> Mod | None:
        return reply_mod(lambda glob, local: selective(glob, local, params.share))
