"""An attack worker process: computes shadow updates, files anonymous updates, fits attackers.

It runs off the FL critical path and sees only what ``attacks.records`` carries.
"""

from __future__ import annotations

import time
import traceback
from multiprocessing.queues import Queue
from typing import Any

import numpy as np

from attacks.knowledge import AttackerKnowledge
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.reidentify import fit_score
from attacks.shadow import shadow_updates
from attacks.suite import run_fit, run_round
from leakbed.store import UpdateStore


def _handle_round(store: UpdateStore, knowledge: AttackerKnowledge, snap: RoundSnapshot) -> tuple[Any, ...]:
    t0 = time.perf_counter()
    store.write_global(snap.round, snap.arrays)
    labels, vectors = shadow_updates(knowledge, snap)
    store.write_shadow(snap.round, labels, vectors)
    run_round(store, knowledge, snap)
    return ("round", snap.round, time.perf_counter() - t0)


def _handle_updates(store: UpdateStore, batch: str, updates: list[AnonymousUpdate]) -> tuple[Any, ...]:
    rnd = updates[0].round
    ids = [u.update_id for u in updates]
    store.write_anon(rnd, batch, ids, np.stack([u.vector for u in updates]), np.asarray([u.num_examples for u in updates]))
    if updates[0].arrays is not None:
        store.write_anon_full(rnd, batch, ids, [u.arrays or {} for u in updates])
    return ("updates", rnd, len(updates))


def _handle_fit(store: UpdateStore, knowledge: AttackerKnowledge, name: str) -> tuple[Any, ...]:
    t0 = time.perf_counter()
    if name in knowledge.attack.suite:
        run_fit(store, knowledge, name)
        return ("fit", name, time.perf_counter() - t0)
    x_train, y_train, _ = store.read_shadow()
    anon = store.read_anon()
    scores = fit_score(name, knowledge.attack, knowledge.seed, x_train, y_train, anon["vectors"])
    store.write_predictions(name, anon["ids"], anon["round"], scores.classes, scores.scores)
    return ("fit", name, time.perf_counter() - t0)


def worker_main(worker_id: int, knowledge_path: str, store_root: str, tasks: Queue, acks: Queue) -> None:
    """Serve tasks until the ``None`` sentinel; every task is acknowledged, failures included."""
    import pickle
    from pathlib import Path

    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)  # one BLAS thread per worker: oversubscribed BLAS threads spin and stall the FL clients
    knowledge: AttackerKnowledge = pickle.loads(Path(knowledge_path).read_bytes())
    store = UpdateStore(store_root)
    while (task := tasks.get()) is not None:
        kind = task[0]
        try:
            if kind == "round":
                ack = _handle_round(store, knowledge, task[1])
            elif kind == "updates":
                ack = _handle_updates(store, task[1], task[2])
            elif kind == "fit":
                ack = _handle_fit(store, knowledge, task[1])
            else:
                raise ValueError(f"unknown task {kind!r}")
        except Exception as err:  # a failed task is reported, never lost
            ack = (
                "error",
                kind,
                task[1] if len(task) > 1 and isinstance(task[1], str) else None,
                f"worker {worker_id}: {type(err).__name__}: {err}",
                traceback.format_exc(limit=3),
                len(task[2]) if kind == "updates" else 0,
            )
        acks.put(ack)
