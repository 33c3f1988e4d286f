"""One-way seeds for each party, derived from the experiment seed.

The experiment seed is a secret of the product and the referee: from it the synthetic users'
data, the device sampling and the simulated node ids are regenerated. Every other party gets only
a seed derived for its own purpose (a keyed BLAKE2b hash), from which neither the experiment seed
nor any other purpose's seed can be computed, so runs stay reproducible without handing out the
secret. A small experiment seed can still be guessed by trying them all: see the README's threat
model for what that does and does not give an attack.
"""

from __future__ import annotations

import hashlib
import random

PURPOSES = ("attacker", "sampling", "node-ids", "secagg", "audit")


def derived_seed(seed: int, purpose: str) -> int:
    """A 32-bit seed for ``purpose`` (one of ``PURPOSES``), one-way from ``seed`` (32 bits: what
    scikit-learn and NumPy accept as a random state)."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown seed purpose {purpose!r}; known: {', '.join(PURPOSES)}")
    h = hashlib.blake2b(str(int(seed)).encode(), digest_size=4, person=b"leakbed-seed", salt=purpose.encode()[:16])
    return int.from_bytes(h.digest(), "big")


def node_ticket(ticket_seed: int, partition: int) -> int:
    """The sampling ticket of the device holding ``partition``: the ``partition``-th non-zero, distinct 64-bit draw
    of a generator seeded with ``ticket_seed`` (``derived_seed(seed, "node-ids")``), which is the node id the seeded
    in-process simulation of earlier versions gave that device, so the server samples the same users for a seed
    whatever node ids the SuperLink hands out (simulation or deployment)."""
    rng = random.Random(f"leakbed-node-ids/{ticket_seed}")
    drawn: set[int] = set()
    while True:
        value = rng.getrandbits(64)
        if not value or value in drawn:
            continue
        if len(drawn) == partition:
            return value
        drawn.add(value)
