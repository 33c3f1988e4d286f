"""Style attributes of handwritten characters, measured from their pixels.

FEMNIST carries no attribute besides the character, yet seeds 001 §6.1.3 (attributes), 002 §7.1.4
(batch properties) and 004 §3.3 (per-sample properties) need attributes that are not the main
task's label. Writers differ in pen and hand, so two style measures are taken from each image:

- ``property`` (per example, binary): the stroke is **bold**, i.e. the image's ink exceeds the
  median ink of its character over the whole corpus. Normalising by character keeps the property
  independent of the label (a "W" holds more ink than an "l"), as the seeds' properties are of
  their main tasks; about half the images hold it, and writers hold it at very different rates.
- ``weight`` and ``slant`` (per user, tertiles 0/1/2 over the users): the writer's mean log ink
  relative to the character medians, and the writer's mean shear μ11/μ02 (how far strokes lean,
  the quantity deskewing removes).

They are facts of the data, computed once at load time, and only the referee and the attacker's
own prior see them, like every other attribute.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.data.corpus import UserData

_EPS = 1e-6


def ink(x: np.ndarray) -> np.ndarray:
    """Mean intensity of each image (ink = 1, background = 0), shape (n,)."""
    return x.reshape(len(x), -1).mean(axis=1)


def shear(x: np.ndarray) -> np.ndarray:
    """Ink-weighted μ11/μ02 of each image: > 0 when strokes lean right as they rise."""
    imgs = x.reshape(len(x), x.shape[-2], x.shape[-1]).astype(np.float64)
    rows = np.arange(imgs.shape[1], dtype=np.float64)[None, :, None]
    cols = np.arange(imgs.shape[2], dtype=np.float64)[None, None, :]
    mass = imgs.sum(axis=(1, 2)) + _EPS
    cy = (imgs * rows).sum(axis=(1, 2)) / mass
    cx = (imgs * cols).sum(axis=(1, 2)) / mass
    dy = rows - cy[:, None, None]
    dx = cols - cx[:, None, None]
    mu11 = (imgs * dx * dy).sum(axis=(1, 2))
    mu02 = (imgs * dy * dy).sum(axis=(1, 2)) + _EPS
    return -mu11 / mu02  # image rows grow downwards: a right lean has negative μ11


def _tertile(values: dict[str, float]) -> dict[str, int]:
    cuts = np.quantile(list(values.values()), [1 / 3, 2 / 3])
    return {u: int(np.searchsorted(cuts, v, side="right")) for u, v in values.items()}


def with_style_attributes(users: dict[str, UserData]) -> dict[str, UserData]:
    """The users with ``property`` (bold), ``weight`` and ``slant`` added to their attributes."""
    if not users:
        return users
    inks = {u: ink(d.x) for u, d in users.items()}
    all_y = np.concatenate([d.y for d in users.values()])
    all_ink = np.concatenate(list(inks.values()))
    median = np.zeros(int(all_y.max()) + 1)
    for k in np.unique(all_y):
        median[k] = np.median(all_ink[all_y == k])
    rel = {u: np.log((inks[u] + _EPS) / (median[d.y] + _EPS)) for u, d in users.items()}
    weight = _tertile({u: float(r.mean()) for u, r in rel.items()})
    slant = _tertile({u: float(shear(d.x).mean()) for u, d in users.items()})
    out = {}
    for u, d in users.items():
        n = len(d)
        attrs = {
            **d.attrs,
            "property": (rel[u] > 0).astype(np.int64),
            "weight": np.full(n, weight[u], np.int64),
            "slant": np.full(n, slant[u], np.int64),
        }
        out[u] = UserData(x=d.x, y=d.y, t=d.t, attrs=attrs)
    return out
