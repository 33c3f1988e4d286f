"""Shadow updates: the attacker replays DeviceUpdate on its prior data (seed 001 §6, "Training and
Evaluation Data for Attacker"), one per known user and round, on that round's global model with
the training config the server sent. These labelled updates train the re-identification models.

Threat model: the curious server replays training on its own prior data D_u^prior only (never a
device's private data), with the global model and training config it already holds.

By default the users train together, at most ``attack.shadow_batch_users`` at a time (fewer where
``core.batched_training.chunk_users``' memory bound says so), in one batched computation
(``core.batched_training``: the loop's updates within float tolerance). ``shadow_batch_users = 0``
keeps the one-user-at-a-time loop, which is also taken where the batched path cannot express the
model (``core.batched_training.unsupported``: RNNs other than a unidirectional, unprojected
``nn.LSTM``, dropout between LSTM layers, dropout variants other than ``nn.Dropout``, a dropout
module run twice per forward, modules with buffers besides batch norm's running statistics) or
where the attack keys name a buffer rather than a parameter.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import numpy as np
import torch

from leakbed.core.batched_training import batched_local_updates, chunk_users, unsupported
from leakbed.core.heap import release_free_heap
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import build_model
from leakbed.core.records import RoundSnapshot
from leakbed.core.training import TrainConfig, load_arrays, local_update, pick_device, state_arrays
from leakbed.core.updates import delta_vector


def shadow_seed(knowledge: AttackerKnowledge, rnd: int, user: str) -> int:
    """The seed of one user's shadow training at round ``rnd``: its batch order and dropout masks."""
    return zlib.crc32(f"{knowledge.seed}/{rnd}/{user}/shadow".encode())


def shadow_updates(
    knowledge: AttackerKnowledge, snapshot: RoundSnapshot, timings: dict[str, float] | None = None
) -> tuple[list[str], np.ndarray]:
    """(identities, vectors) of one shadow update per known user at this round; ``timings``, when
    given, accumulates wall seconds per phase (benchmarks.shadow reports them): model, train or the
    batched phases (plan, prepare, gradients, optimizer, collect), vectors."""
    clock = [time.perf_counter()]

    def lap(phase: str | None) -> None:
        now = time.perf_counter()
        if timings is not None and phase:
            timings[phase] = timings.get(phase, 0.0) + now - clock[0]
        clock[0] = now

    cfg = TrainConfig.from_config(snapshot.train_config)
    device = pick_device(knowledge.device)
    model = build_model(knowledge.model, knowledge.corpus_meta)
    load_arrays(model, snapshot.arrays)  # also checks the round's arrays fit the model
    users = list(knowledge.prior)
    batched = batchable(knowledge, model)
    lap("model")
    if batched:
        return users, _batched(knowledge, snapshot, model, cfg, device, timings, lap)
    vectors = []
    for user, data in knowledge.prior.items():
        load_arrays(model, snapshot.arrays)
        seed = shadow_seed(knowledge, snapshot.round, user)
        torch.manual_seed(seed)
        local_update(model, data, knowledge.corpus_meta.task, cfg, seed=seed, device=device)
        lap("train")
        vectors.append(delta_vector(snapshot.arrays, state_arrays(model), knowledge.keys))
        lap("vectors")
    return users, np.stack(vectors)


def batchable(knowledge: AttackerKnowledge, model: torch.nn.Module) -> bool:
    """Whether ``shadow_updates`` takes the batched path for this knowledge and model."""
    if not knowledge.shadow_batch_users or not set(knowledge.keys) <= {n for n, _ in model.named_parameters()}:
        return False
    sample = next((d.x[:1] for d in knowledge.prior.values() if len(d)), None)
    return unsupported(model, torch.from_numpy(sample) if sample is not None else None) is None


def _batched(
    knowledge: AttackerKnowledge,
    snapshot: RoundSnapshot,
    model: torch.nn.Module,
    cfg: TrainConfig,
    device: torch.device,
    timings: dict[str, float] | None,
    lap: Callable[[str | None], None],
) -> np.ndarray:
    """Shadow vectors in ``knowledge.prior`` order; users of similar size share a chunk (fewer idle steps)."""
    users = list(knowledge.prior)
    task = knowledge.corpus_meta.task
    by_size = sorted(range(len(users)), key=lambda i: -len(knowledge.prior[users[i]]))
    sample = next((d.x for d in knowledge.prior.values() if len(d)), None)
    cap = knowledge.shadow_batch_users
    per = chunk_users(model, torch.from_numpy(sample), task, cfg, device, cap) if sample is not None else 1
    lap("plan")
    vectors: list[np.ndarray] = [np.empty(0, np.float32)] * len(users)
    for start in range(0, len(users), per):
        part = by_size[start : start + per]
        local = batched_local_updates(
            model,
            snapshot.arrays,
            [knowledge.prior[users[i]] for i in part],
            task,
            cfg,
            seeds=[shadow_seed(knowledge, snapshot.round, users[i]) for i in part],
            device=device,
            keys=knowledge.keys,
            timings=timings,
        )
        lap(None)  # the batched phases are in timings already
        for j, i in enumerate(part):
            vectors[i] = delta_vector(snapshot.arrays, {k: v[j].numpy() for k, v in local.items()}, knowledge.keys)
        del local
        release_free_heap()  # the next chunk's tensors differ in size: without it the heap keeps growing
        lap("vectors")
    return np.stack(vectors)
