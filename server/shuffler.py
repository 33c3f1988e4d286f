"""The shuffler stage (seed 001 §3, "De-identification in FL"): strips every reply of identity.

It removes the node id, timing and arrival order, assigns an opaque update id (from the referee's
per-run key, which no seed regenerates), seals the ground truth for the referee only, and emits
plain anonymous updates for aggregation and the attacks, in an order given by their content alone
(a hash of the weights the attack side receives anyway), so the order carries nothing else.
With ``batch_min`` > 0 it holds them across rounds and releases batches (``server/batching.py``).
"""

from __future__ import annotations

import hashlib

import numpy as np
from flwr.app import Message

from attacks import AnonymousUpdate
from core.updates import delta_vector
from referee.seal import Sealer
from server.batching import BatchRelease, HeldUpdate, nearest_global

TRUTH_KEY = "leakbed-truth"


class Shuffler:
    def __init__(
        self,
        sealer: Sealer,
        keys: list[str],
        *,
        full_updates: bool = False,
        batch_min: int = 0,
        reference: str = "release",
    ) -> None:
        self._sealer = sealer
        self._keys = keys
        self._full = full_updates  # pass every parameter's Δw on (suite attacks that read whole updates)
        self.batching = BatchRelease(batch_min)
        self._reference = reference
        self._globals: dict[int, dict[str, np.ndarray]] = {}  # global models of the rounds since the last release

    def process(self, rnd: int, global_arrays: dict[str, np.ndarray], replies: list[Message]) -> list[AnonymousUpdate]:
        """Take the truth record out of each reply (in place) and return the released anonymous updates,
        shuffled; their Δw is taken against this (the release) round's global model."""
        held = []
        for msg in replies:
            truth = msg.content.config_records[TRUTH_KEY]
            del msg.content[TRUTH_KEY]
            arrays = msg.content.array_records["arrays"]
            update_id = self._sealer.new_update_id()
            fields = {k: v for k, v in truth.items() if k != "user-id"}
            self._sealer.seal(update_id, str(truth["user-id"]), rnd, fields)
            n = int(msg.content.metric_records["metrics"]["num-examples"])
            kept = global_arrays if self._full else self._keys
            held.append(HeldUpdate(update_id, rnd, {k: np.array(arrays[k].numpy()) for k in kept}, n))
        if self._reference == "nearest":
            self._globals[rnd] = {k: np.array(global_arrays[k]) for k in (global_arrays if self._full else self._keys)}
        out = []
        released = self.batching.offer(rnd, held)
        for h in released:
            ref = nearest_global(self._globals, h.local, self._keys) if self._reference == "nearest" else global_arrays
            full = None
            if self._full:
                full = {k: (ref[k] - h.local[k]).astype(np.float32) for k in global_arrays}
            out.append(AnonymousUpdate(h.update_id, rnd, delta_vector(ref, h.local, self._keys), h.num_examples, full))
        if released:
            self._globals.clear()
        return sorted(out, key=_content_order)


def _content_order(update: AnonymousUpdate) -> str:
    """A release order that depends only on what the attack side receives anyway (the Δw)."""
    return hashlib.sha256(np.ascontiguousarray(update.vector).tobytes()).hexdigest()
