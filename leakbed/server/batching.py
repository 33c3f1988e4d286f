"""Shuffler batching as a system-level defense (seed 001 §3: the shuffler "may batch reports").

The shuffler holds de-identified updates across rounds and hands them to the curious server's
attacks only once at least ``batch_min`` are waiting, all in one shuffled batch. Aggregation is
untouched (FedAvg still averages every round's updates in that round); what changes is what the
attacker sees and when: a released update carries only the release round, so the attacker no
longer knows which round, hence which global model, it was trained from, and computes Δw against
the global model of the release round (the latest it knows). An adaptive attacker
(``reference = "nearest"``) instead takes, for each update, the global model of the batch's rounds
nearest to the update's weights: local training moves weights only a little from where it started.
Updates still held when training ends (fewer than ``batch_min``) are never released: they are
counted as ``withheld``, so ``held == released + withheld`` always balances.
Threat model: the shuffler is trusted (it alone sees identities and rounds); the server is not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class HeldUpdate:
    """An anonymous update waiting in the shuffler: its weights, not yet a Δw."""

    update_id: str
    round: int
    local: dict[str, np.ndarray]
    num_examples: int


@dataclass
class BatchStats:
    batch_min: int
    held: int = 0
    released: int = 0
    batches: list[int] = field(default_factory=list)
    release_rounds: list[int] = field(default_factory=list)
    max_delay_rounds: int = 0

    @property
    def withheld(self) -> int:
        return self.held - self.released

    def to_dict(self) -> dict:
        return {**asdict(self), "withheld": self.withheld}


class BatchRelease:
    """Holds updates until at least ``batch_min`` wait, then releases them all (0 = release every round)."""

    def __init__(self, batch_min: int) -> None:
        self.stats = BatchStats(batch_min)
        self._pending: list[HeldUpdate] = []

    def offer(self, rnd: int, items: list[HeldUpdate]) -> list[HeldUpdate]:
        """Add this round's updates; returns the released batch (possibly empty)."""
        self._pending.extend(items)
        self.stats.held += len(items)
        if not self._pending or len(self._pending) < self.stats.batch_min:
            return []
        out, self._pending = self._pending, []
        self.stats.released += len(out)
        self.stats.batches.append(len(out))
        self.stats.release_rounds.append(rnd)
        self.stats.max_delay_rounds = max(self.stats.max_delay_rounds, max(rnd - u.round for u in out))
        return out


def nearest_global(
    candidates: dict[int, dict[str, np.ndarray]], local: dict[str, np.ndarray], keys: list[str]
) -> dict[str, np.ndarray]:
    """The candidate global model closest (L2 over ``keys``) to an update's weights; ties go to the latest round."""

    def distance(rnd: int) -> float:
        g = candidates[rnd]
        return float(sum(np.sum((np.asarray(local[k], np.float64) - g[k]) ** 2) for k in keys))

    return candidates[min(sorted(candidates, reverse=True), key=distance)]
