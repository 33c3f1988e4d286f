"""What the attack side receives: plain arrays and metadata, nothing of Flower, no identities.

This is the whole interface between the curious server and its attacks. An anonymous update
carries an opaque id, the round and the representation vector; the ground truth behind the id
stays with the server's referee.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


@dataclass(frozen=True)
class AnonymousUpdate:
    """One shuffled, de-identified update: what the honest-but-curious server sees of a device."""

    update_id: str
    round: int
    vector: np.ndarray  # flattened, L2-normalised Δw over the attack layers
    num_examples: int
    arrays: dict[str, np.ndarray] | None = None  # full Δw per parameter, only when a suite attack needs it
    # What the report carries besides its weights (seed 001 §3 assumes a shuffler strips it; ``attacks.metadata``
    # measures what it gives away), all of the device's own Δw over every parameter: its L2 norm, the share
    # of exactly-zero entries, and the reply's array bytes.
    norm: float = 0.0
    sparsity: float = 0.0
    nbytes: int = 0


@dataclass(frozen=True)
class RoundSnapshot:
    """The round's global model and the training config the server sent with it."""

    round: int
    arrays: dict[str, np.ndarray]
    train_config: dict[str, float | int | str] = field(default_factory=dict)


def received_fields(train_keys: list[str], full_updates: bool) -> dict[str, list[str]]:
    """What the attack side received in a run, for the report: per update, per round, and once.
    ``sampled`` among the train keys: the round's sampled nodes as per-run keyed pseudonyms (``attacks.linkage``)."""
    update = [f.name for f in fields(AnonymousUpdate) if f.name != "arrays" or full_updates]
    named = {"sampled": "sampled nodes (per-run keyed pseudonyms)"}
    return {
        "update": update,
        "round": ["round", "global model", *(named.get(k, f"train config: {k}") for k in train_keys)],
        "once": ["prior data of the known users", "corpus shape", "model and attack settings", "the attacker's own seed"],
    }
