"""The shuffler stage (seed 001 §3, "De-identification in FL"): strips every reply of identity.

It removes the node id, timing and arrival order, assigns an opaque update id (from the referee's
per-run key, which no seed regenerates), seals the ground truth for the referee only, and emits
plain anonymous updates for aggregation and the attacks, in an order given by their content alone
(a hash of the weights the attack side receives anyway), so the order carries nothing else.
With ``batch_min`` > 0 it holds them across rounds and releases batches (``leakbed/server/batching.py``).

What it does not strip is what FedAvg needs or any report carries: the example count, and the norm,
sparsity and size of the device's Δw (``report_meta``; ``attacks.metadata`` measures what they give
away). They are the device's own Δw against the model it trained from, which is what the seed's
device transmits (seed 001 Algorithm 1), so batching hides the round but not these. The truth
record also keeps the replying node's per-run pseudonym (``Sealer.pseudonym``), which the
server's sampling uses when ``attacks.linkage`` is given the participation sets.
"""

from __future__ import annotations

import hashlib

import numpy as np
from flwr.app import Message

from leakbed.core.records import AnonymousUpdate
from leakbed.core.updates import delta_vector
from leakbed.referee.seal import Sealer
from leakbed.server.batching import BatchRelease, HeldUpdate, nearest_global

TRUTH_KEY = "leakbed-truth"
AGGREGATE_KEY = "leakbed-aggregate"  # a reply that is a round's SecAgg+ aggregate: its participants and dropouts


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
        self._meta: dict[str, tuple[float, float, int]] = {}  # update id -> (norm, sparsity, bytes) until released

    def pseudonym(self, node_id: int) -> str:
        """The node's per-run keyed pseudonym (never its raw id): what the server's sampling may share."""
        return self._sealer.pseudonym(node_id)

    def process(self, rnd: int, global_arrays: dict[str, np.ndarray], replies: list[Message]) -> list[AnonymousUpdate]:
        """Take the truth record out of each reply (in place) and return the released anonymous updates,
        shuffled; their Δw is taken against this (the release) round's global model."""
        held = []
        for msg in replies:
            truth = msg.content.config_records[TRUTH_KEY]
            del msg.content[TRUTH_KEY]
            aggregate = AGGREGATE_KEY in msg.content.config_records
            if aggregate:
                del msg.content[AGGREGATE_KEY]
            arrays = msg.content.array_records["arrays"]
            update_id = self._sealer.new_update_id()
            fields = {k: v for k, v in truth.items() if k != "user-id"}
            if not aggregate:  # an aggregate is no one node's reply
                fields["node"] = self._sealer.pseudonym(msg.metadata.src_node_id)
            self._sealer.seal(update_id, str(truth["user-id"]), rnd, fields)
            n = int(msg.content.metric_records["metrics"]["num-examples"])
            self._meta[update_id] = report_meta(global_arrays, {k: arrays[k].numpy() for k in arrays})
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
            norm, sparsity, nbytes = self._meta.pop(h.update_id)
            vec = delta_vector(ref, h.local, self._keys)
            out.append(AnonymousUpdate(h.update_id, rnd, vec, h.num_examples, full, norm, sparsity, nbytes))
        if released:
            self._globals.clear()
        return sorted(out, key=_content_order)


def report_meta(global_arrays: dict[str, np.ndarray], local: dict[str, np.ndarray]) -> tuple[float, float, int]:
    """(L2 norm, share of exactly-zero entries, bytes) of a reply's Δw over every floating-point parameter;
    the bytes count every array the reply carries."""
    sq, zeros, size, nbytes = 0.0, 0, 0, 0
    for k, w in local.items():
        nbytes += int(np.asarray(w).nbytes)
        g = global_arrays.get(k)
        if g is None or not np.issubdtype(np.asarray(g).dtype, np.floating):
            continue
        d = np.asarray(g, np.float64) - np.asarray(w, np.float64)
        sq += float(np.dot(d.ravel(), d.ravel()))
        zeros += int(np.count_nonzero(d == 0))
        size += d.size
    return float(np.sqrt(sq)), (zeros / size if size else 0.0), nbytes


def _content_order(update: AnonymousUpdate) -> str:
    """A release order that depends only on what the attack side receives anyway (the Δw)."""
    return hashlib.sha256(np.ascontiguousarray(update.vector).tobytes()).hexdigest()
