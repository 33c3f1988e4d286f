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

Several lanes may share a round's work (``share``: the k-th of n shares of the known users, ``share_of``), each
training its share as the whole set trains it: the same chunks, each step padded and on the loss path of the whole
chunk (``core.batched_training``'s ``company``), the same seeds; the pool files the shares' updates in the
knowledge's order. The one-user loop gives the same updates bit for bit whatever the split, and so does the batched
path where ``core.batched_training.stack_invariant`` holds (no convolution); the pool splits rounds only there, and
sends other rounds whole to one lane. ``tests/attacks/test_shadow_shares.py``.
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
    knowledge: AttackerKnowledge,
    snapshot: RoundSnapshot,
    timings: dict[str, float] | None = None,
    share: tuple[int, int] = (0, 1),
) -> tuple[list[str], np.ndarray]:
    """(identities, vectors) of one shadow update per known user of ``share`` (the k-th of n shares: ``share_of``;
    all of them by default) at this round, in the knowledge's order; ``timings``, when given, accumulates wall
    seconds per phase (benchmarks.shadow reports them): model, train or the batched phases (plan, prepare,
    gradients, optimizer, collect), vectors."""
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
    mine = share_of(knowledge, share)
    batched = batchable(knowledge, model)
    lap("model")
    if batched:
        return [users[i] for i in mine], _batched(knowledge, snapshot, model, cfg, device, timings, lap, share)
    vectors = []
    for i in mine:
        user, data = users[i], knowledge.prior[users[i]]
        load_arrays(model, snapshot.arrays)
        seed = shadow_seed(knowledge, snapshot.round, user)
        torch.manual_seed(seed)
        local_update(model, data, knowledge.corpus_meta.task, cfg, seed=seed, device=device)
        lap("train")
        vectors.append(delta_vector(snapshot.arrays, state_arrays(model), knowledge.keys))
        lap("vectors")
    return [users[i] for i in mine], np.stack(vectors)


def by_size(knowledge: AttackerKnowledge) -> list[int]:
    """The known users (indices in the knowledge's order), largest prior first: the batched path's chunk order."""
    users = list(knowledge.prior)
    return sorted(range(len(users)), key=lambda i: -len(knowledge.prior[users[i]]))


def share_of(knowledge: AttackerKnowledge, share: tuple[int, int]) -> list[int]:
    """The users of the k-th of n shares (indices in the knowledge's order, ascending): every n-th user in ``by_size``
    order from the k-th, so the shares hold about as many examples each, and each chunk's users spread over them."""
    k, n = share
    if not 0 <= k < n:
        raise ValueError(f"share {k} of {n}: want 0 <= k < n")
    mine = sorted(by_size(knowledge)[k::n])
    if not mine:
        raise ValueError(f"share {k} of {n} holds none of the {len(knowledge.prior)} known users")
    return mine


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
    share: tuple[int, int] = (0, 1),
) -> np.ndarray:
    """Shadow vectors of ``share``'s users in the knowledge's order; users of similar size share a chunk (fewer idle
    steps). The chunks are the whole set's; a share trains its users of each chunk in that chunk's company."""
    users = list(knowledge.prior)
    task = knowledge.corpus_meta.task
    order = by_size(knowledge)
    k, n = share
    sample = next((d.x for d in knowledge.prior.values() if len(d)), None)
    cap = knowledge.shadow_batch_users
    per = chunk_users(model, torch.from_numpy(sample), task, cfg, device, cap) if sample is not None else 1
    lap("plan")
    seeds = {i: shadow_seed(knowledge, snapshot.round, users[i]) for i in order}
    vectors: dict[int, np.ndarray] = {}
    for start in range(0, len(order), per):
        chunk = order[start : start + per]
        part = [i for pos, i in enumerate(chunk, start) if pos % n == k]
        if not part:
            continue
        company = [(len(knowledge.prior[users[i]]), seeds[i]) for i in chunk] if len(part) < len(chunk) else []
        local = batched_local_updates(
            model,
            snapshot.arrays,
            [knowledge.prior[users[i]] for i in part],
            task,
            cfg,
            seeds=[seeds[i] for i in part],
            device=device,
            keys=knowledge.keys,
            timings=timings,
            company=company,
        )
        lap(None)  # the batched phases are in timings already
        for j, i in enumerate(part):
            vectors[i] = delta_vector(snapshot.arrays, {key: v[j].numpy() for key, v in local.items()}, knowledge.keys)
        del local
        release_free_heap()  # the next chunk's tensors differ in size: without it the heap keeps growing
        lap("vectors")
    return np.stack([vectors[i] for i in sorted(vectors)])
