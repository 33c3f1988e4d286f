"""The embedded synthetic population: users whose selection bias and capture style are knobs.

Seed 001 §4.2 attributes deanonymization to users' selection bias (what they photograph) and
capture style (how); here both are explicit and scaled by ``bias``, so ``bias = 0`` is the seed's
IID control (§6.1.1): every user draws from the same distribution and attacks must fall to chance.
Class preferences drift along each user's timeline and vary by album, so a chrono prior is
harder than a random one, as in the seed's Table 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leakbed.core.config import SyntheticConfig
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.lazy_users import LazyUsers

_YEAR_S = 365.0 * 24 * 3600
_DIRICHLET_ALPHA = 0.3  # concentration of a biased user's class preferences


def _prototypes(rng: np.random.Generator, classes: int, channels: int, size: int) -> np.ndarray:
    """Smooth random class templates: low-resolution noise upsampled to the image size."""
    coarse = rng.random((classes, channels, 4, 4))
    reps = -(-size // 4)
    up = np.kron(coarse, np.ones((1, 1, reps, reps)))[:, :, :size, :size]
    # a 3x3 box blur removes the blockiness so shifts change the image smoothly
    padded = np.pad(up, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    blurred = sum(padded[:, :, i : i + size, j : j + size] for i in range(3) for j in range(3)) / 9.0
    lo = blurred.min(axis=(1, 2, 3), keepdims=True)
    hi = blurred.max(axis=(1, 2, 3), keepdims=True)
    return ((blurred - lo) / (hi - lo + 1e-9)).astype(np.float32)


def _user_size(rng: np.random.Generator, cfg: SyntheticConfig) -> int:
    return max(8, int(round(cfg.examples_per_user * rng.lognormal(0.0, cfg.size_spread))))


def _class_draws(rng: np.random.Generator, cfg: SyntheticConfig, tau: np.ndarray, album: np.ndarray) -> np.ndarray:
    """Classes for one user's examples at timeline positions ``tau`` in ``album``."""
    k = cfg.classes
    uniform = np.full(k, 1.0 / k)
    start, end = rng.dirichlet(np.full(k, _DIRICHLET_ALPHA), size=2)
    albums = rng.dirichlet(np.full(k, _DIRICHLET_ALPHA), size=cfg.albums_per_user)
    own = (1 - cfg.drift * tau)[:, None] * start + (cfg.drift * tau)[:, None] * end
    own = (1 - cfg.album_mix) * own + cfg.album_mix * albums[album]
    probs = (1 - cfg.bias) * uniform + cfg.bias * own
    cum = probs.cumsum(axis=1)
    u = rng.random(len(tau))[:, None]
    return np.minimum((u > cum).sum(axis=1), k - 1).astype(np.int64)


def _render(rng: np.random.Generator, cfg: SyntheticConfig, protos: np.ndarray, y: np.ndarray, prop: np.ndarray) -> np.ndarray:
    """Images: shifted, contrast-jittered templates with noise, then the user's capture style."""
    n = len(y)
    img = protos[y].copy()
    shifts = rng.integers(-1, 2, size=(n, 2))
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
            if sel.any() and (dy or dx):
                img[sel] = np.roll(img[sel], shift=(dy, dx), axis=(2, 3))
    img *= rng.uniform(0.8, 1.2, size=(n, 1, 1, 1)).astype(np.float32)
    img += rng.normal(0.0, cfg.noise, size=img.shape).astype(np.float32)
    strength = cfg.bias * cfg.style
    gain = 1.0 + strength * rng.normal(0.0, 0.25, size=(1, cfg.channels, 1, 1))
    offset = strength * rng.normal(0.0, 0.08, size=(1, cfg.channels, 1, 1))
    img = img * gain.astype(np.float32) + offset.astype(np.float32)
    img[prop.astype(bool), :, :3, :3] = 1.0  # the property: a bright corner mark
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def _user(rng: np.random.Generator, cfg: SyntheticConfig, protos: np.ndarray) -> UserData:
    n = _user_size(rng, cfg)
    tau = np.sort(rng.random(n))
    album = np.minimum((tau * cfg.albums_per_user).astype(np.int64), cfg.albums_per_user - 1)
    y = _class_draws(rng, cfg, tau, album)
    rate = (1 - cfg.bias) * cfg.property_rate + cfg.bias * rng.beta(1.0, (1 - cfg.property_rate) / max(cfg.property_rate, 1e-3))
    prop = (rng.random(n) < rate).astype(np.int64)
    x = _render(rng, cfg, protos, y, prop)
    start = rng.uniform(0.0, 5 * _YEAR_S)
    t = start + tau * 2 * _YEAR_S
    return UserData(x=x, y=y, t=t.astype(np.float64), attrs={"album": album, "property": prop})


def _nth_user(cfg: SyntheticConfig, seed: int, protos: np.ndarray, u: int) -> UserData:
    """User ``u`` of the population, from its own generator: any user is made again alone."""
    return _user(np.random.default_rng([seed, u]), cfg, protos)


@dataclass(frozen=True)
class _Population:
    """What makes any one user again: the config, seed, class templates and each user's index, plus
    the per-user attributes that depend on the whole population (computed once, in one pass)."""

    cfg: SyntheticConfig
    seed: int
    protos: np.ndarray
    index: dict[str, int]
    interest: dict[str, int]
    tone: dict[str, int]

    def user(self, name: str) -> UserData:
        d = _nth_user(self.cfg, self.seed, self.protos, self.index[name])
        n = len(d)
        attrs = {**d.attrs, "interest": np.full(n, self.interest[name], np.int64), "tone": np.full(n, self.tone[name], np.int64)}
        return UserData(x=d.x, y=d.y, t=d.t, attrs=attrs)


def _attributes(cfg: SyntheticConfig, seed: int, protos: np.ndarray, index: dict[str, int]) -> tuple[dict, dict, dict]:
    """Per-user attributes for attribute inference (seed 001 §6.1.3), derived from what shapes a
    user's data so that they are reflected in it: ``interest`` = which third of the classes the user
    photographs most (selection bias), ``tone`` = the tertile of the user's mean brightness over the
    population (capture style). Both are constant per user and need no random draw, so every other
    number of the population is unchanged; with ``bias = 0`` they are noise (the IID control).
    One user at a time, so the pass holds one user's images, not the population's."""
    sizes, interest, brightness = {}, {}, {}
    for name, u in index.items():
        d = _nth_user(cfg, seed, protos, u)
        sizes[name] = len(d)
        interest[name] = int(np.argmax(np.bincount(d.y * 3 // cfg.classes, minlength=3)))
        brightness[name] = float(d.x.mean())
    cuts = np.quantile(list(brightness.values()), [1 / 3, 2 / 3])
    tone = {name: int(np.searchsorted(cuts, b, side="right")) for name, b in brightness.items()}
    return sizes, interest, tone


def generate(cfg: SyntheticConfig, seed: int, first_user: int = 0) -> Corpus:
    """A reproducible population: the same config and seed give the same bytes.

    Users are made on access (``LazyUsers``), so a device holds its own user's images only.
    ``first_user`` offsets user indices, giving a disjoint population that shares the class
    templates (the background data of the augmentation defenses).
    """
    rng = np.random.default_rng([seed, 0x5EED])
    protos = _prototypes(rng, cfg.classes, cfg.channels, cfg.image_size)
    width = len(str(first_user + cfg.users - 1))
    index = {f"user{u:0{width}d}": u for u in range(first_user, first_user + cfg.users)}
    sizes, interest, tone = _attributes(cfg, seed, protos, index)
    population = _Population(cfg, seed, protos, index, interest, tone)
    return Corpus(
        name="synthetic",
        task="multiclass",
        num_classes=cfg.classes,
        input_shape=(cfg.channels, cfg.image_size, cfg.image_size),
        users=LazyUsers(sizes, population.user),
    )
