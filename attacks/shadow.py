"""Shadow updates: the attacker replays DeviceUpdate on its prior data (seed 001 §6, "Training and
Evaluation Data for Attacker"), one per known user and round, on that round's global model with
the training config the server sent. These labelled updates train the re-identification models.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from leakbed.models import build_model
from leakbed.training import TrainConfig, load_arrays, local_update, pick_device, state_arrays
from leakbed.updates import delta_vector


def shadow_updates(knowledge: AttackerKnowledge, snapshot: RoundSnapshot) -> tuple[list[str], np.ndarray]:
    """(identities, vectors) of one shadow update per known user at this round."""
    cfg = TrainConfig.from_config(snapshot.train_config)
    device = pick_device(knowledge.device)
    model = build_model(knowledge.model, knowledge.corpus_meta)
    labels, vectors = [], []
    for user, data in knowledge.prior.items():
        load_arrays(model, snapshot.arrays)
        seed = zlib.crc32(f"{knowledge.seed}/{snapshot.round}/{user}/shadow".encode())
        torch.manual_seed(seed)
        local_update(model, data, knowledge.corpus_meta.task, cfg, seed=seed, device=device)
        vectors.append(delta_vector(snapshot.arrays, state_arrays(model), knowledge.keys))
        labels.append(user)
    return labels, np.stack(vectors)
