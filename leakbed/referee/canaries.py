"""The empirical privacy audit's secret: which canary clients exist, which were inserted, their directions, and what
the released aggregates reveal of them.

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for Federated Learning"
(ICLR 2024) §3-4: canary *clients* whose update is a secret random direction; the cosine of each direction with the
released model deltas, inserted canaries against canaries never inserted, gives ε for user-level DP-FedAvg in the same
run that trains the model. Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run" (NeurIPS 2023): the
same scores give a lower bound on ε at a stated confidence, when each canary is inserted independently with
probability 1/2 (``core.audit``: the views, their estimates with intervals, the bound). Threat model of the audit:
the auditor sees what the curious server releases (every round's aggregate, or the final model alone) and knows the
canaries' secret; it is the referee, the trusted party, so the secret never reaches the attack side (the canaries'
replies enter after the tap, which hands the attacks only real users' updates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from leakbed.core.audit import audit_views, cosines, inserted_mask
from leakbed.core.audit_estimates import LEVEL

CHUNK = 64  # canary directions made at once [rows]: the audit holds k x d floats only when that is small
CACHE_BYTES = 256 * 2**20  # [bytes] directions kept in memory up to this size, regenerated per round above it


class CanaryAudit:
    """One prior's canaries: ``joining`` says which inserted canaries reply in a round and ``update`` what each sends;
    ``observe`` scores every candidate against the round's released delta; ``result`` turns the scores into ε."""

    def __init__(self, candidates: int, rate: float, norm: float, keys: list[str], shapes: Mapping[str, tuple],
                 seed: int) -> None:  # fmt: skip
        self.k, self.norm, self.seed = candidates, norm, seed
        self.keys, self.shapes = keys, dict(shapes)
        self.dim = int(sum(math.prod(shapes[k]) for k in keys))
        self.inserted = inserted_mask(candidates, seed)  # independent coins, as Steinke requires
        self.rate = rate
        self._cache = None if self.k * self.dim * 4 > CACHE_BYTES else self._directions(range(self.k))
        self.per_round_cos: list[np.ndarray] = []  # (k,) per released round
        self.scheduled: list[np.ndarray] = []  # (k,) bool per released round: the canaries due to reply in it
        self._total = np.zeros(self.dim, np.float64)

    @property
    def per_round(self) -> int:
        """Inserted canaries replying each round (a fixed count: the DP wrapper's noise is calibrated to it)."""
        return _share(int(self.inserted.sum()), self.rate)

    def _directions(self, rows: range | np.ndarray) -> np.ndarray:
        """Unit directions of canaries ``rows``, each from a generator of its own (the same whatever the chunking)."""
        out = np.empty((len(rows), self.dim), np.float32)
        for i, j in enumerate(rows):
            v = np.random.default_rng([self.seed, 2, int(j)]).standard_normal(self.dim, dtype=np.float32)
            out[i] = v / np.linalg.norm(v)
        return out

    def schedule(self, rnd: int) -> np.ndarray:
        """The canaries due in round ``rnd``: a fixed share of the inserted ones and, as if they were, of the held-out
        ones (whose schedule only the statistic reads), drawn afresh each round as Flower samples its devices."""
        due = np.zeros(self.k, bool)
        for side, group in enumerate((self.inserted, ~self.inserted)):
            members = np.flatnonzero(group)
            count = _share(len(members), self.rate)
            due[np.random.default_rng([self.seed, 3, side, rnd]).choice(members, count, replace=False)] = True
        return due

    def joining(self, rnd: int) -> np.ndarray:
        """The inserted canaries replying in round ``rnd``."""
        return np.flatnonzero(self.schedule(rnd) & self.inserted)

    def update(self, canary: int) -> dict[str, np.ndarray]:
        """Canary ``canary``'s update Δw: its direction at L2 norm ``norm`` (far above the clipping norm: the device's
        clipper must act on it), shaped as the model's float entries."""
        flat = (self._cache[canary] if self._cache is not None else self._directions([canary])[0]) * self.norm
        out, at = {}, 0
        for key in self.keys:
            n = math.prod(self.shapes[key])
            out[key] = flat[at : at + n].reshape(self.shapes[key])
            at += n
        return out

    def observe(self, rnd: int, delta: np.ndarray) -> None:
        """Score every candidate against a released aggregate's delta (new global model - old, flat)."""
        self._total += delta
        self.per_round_cos.append(self._cosines(delta))
        self.scheduled.append(self.schedule(rnd))

    def _cosines(self, delta: np.ndarray) -> np.ndarray:
        if self._cache is not None:
            return cosines(self._cache, delta)
        parts = [cosines(self._directions(np.arange(a, min(a + CHUNK, self.k))), delta) for a in range(0, self.k, CHUNK)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def statistics(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The final model's cosines (k,) (with the sum of every released delta), the per-round cosines (T, k) and
        which canaries were due each round (T, k)."""
        per_round = np.stack(self.per_round_cos) if self.per_round_cos else np.zeros((0, self.k))
        due = np.stack(self.scheduled) if self.scheduled else np.zeros((0, self.k), bool)
        return self._cosines(self._total.astype(np.float32)), per_round, due

    def result(self, delta: float, confidence: float, level: float = LEVEL) -> dict:
        """Per view (``core.audit.VIEWS``): ε_emp with its ``level`` interval, counts and spreads per side, Steinke et
        al.'s lower bound at ``confidence`` and the most it can show with this many canaries."""
        inserted = self.inserted
        out: dict = {"candidates": self.k, "inserted": int(inserted.sum()), "per_round": self.per_round,
                     "rounds_observed": len(self.per_round_cos), "norm": self.norm, "dimension": self.dim,
                     "delta": delta, "confidence": confidence, "level": level}  # fmt: skip
        if len(self.per_round_cos) == 0 or min(inserted.sum(), (~inserted).sum()) < 2:
            out["note"] = "too few canaries or no released round: no estimate"
            return out
        final, per_round, due = self.statistics()
        return {**out, **audit_views(final, per_round, due, inserted, self.dim, delta, confidence, level)}


def _share(members: int, rate: float) -> int:
    return min(members, max(1, round(rate * members))) if members else 0
