"""The attacker's auxiliary updates (seed 002 Algorithm 7, lines 4-7): local training on its own
auxiliary data, with and without the property, on the round's global model, with the training
config the server sent. Threat model (§7.1.4): the attacker holds data with and without the
property (here: its prior data, whose ``property`` attribute it knows); never a device's data.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from leakbed.core.data.corpus import UserData
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import build_model
from leakbed.core.training import TrainConfig, load_arrays, local_update, pick_device, state_arrays


def property_of(data: UserData) -> np.ndarray:
    if "property" not in data.attrs:
        raise ValueError("property inference needs a per-example 'property' attribute in the data (e.g. synthetic data)")
    return np.asarray(data.attrs["property"]).astype(bool)


def concat(parts: list[UserData]) -> UserData:
    keys = set.intersection(*(set(p.attrs) for p in parts)) if parts else set()
    return UserData(
        np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]),
        np.concatenate([p.t for p in parts]),
        {k: np.concatenate([p.attrs[k] for p in parts]) for k in keys},
    )


def split_by_property(data: UserData) -> tuple[UserData, UserData]:
    """(examples with the property, examples without)."""
    prop = property_of(data)
    return data.take(np.flatnonzero(prop)), data.take(np.flatnonzero(~prop))


def sample_mix(prop: UserData, non: UserData, n: int, k: int, rng: np.random.Generator) -> UserData:
    """n examples of which k hold the property, in random order (with replacement when a pool is short)."""
    if k and not len(prop):
        raise ValueError("the attacker's auxiliary data holds no example with the property")
    if n - k and not len(non):
        raise ValueError("the attacker's auxiliary data holds no example without the property")
    pick = [prop.take(rng.choice(len(prop), k, replace=k > len(prop)))] if k else []
    pick += [non.take(rng.choice(len(non), n - k, replace=n - k > len(non)))] if n - k else []
    data = concat(pick)
    return data.take(rng.permutation(len(data)))


class AuxTrainer:
    """Replays DeviceUpdate on auxiliary data and returns Δw = w_global − w_local for every parameter."""

    def __init__(self, knowledge: AttackerKnowledge, global_arrays: dict[str, np.ndarray], train_config: dict) -> None:
        self.knowledge = knowledge
        self.global_arrays = global_arrays
        self.cfg = TrainConfig.from_config(train_config)
        self.device = pick_device(knowledge.device)
        self.model = build_model(knowledge.model, knowledge.corpus_meta)

    def delta(self, data: UserData, tag: str) -> dict[str, np.ndarray]:
        load_arrays(self.model, self.global_arrays)
        seed = zlib.crc32(f"{self.knowledge.seed}/{tag}/aux".encode())
        torch.manual_seed(seed)
        local_update(self.model, data, self.knowledge.corpus_meta.task, self.cfg, seed=seed, device=self.device)
        local = state_arrays(self.model)
        return {k: (np.asarray(self.global_arrays[k], np.float32) - local[k]).astype(np.float32) for k in self.global_arrays}

    def update_size(self) -> int:
        """Examples behind one device update: B·steps in the FedSGD setting, else a typical prior user's size."""
        if self.cfg.steps:
            return self.cfg.steps * self.cfg.batch_size
        return int(np.median([len(d) for d in self.knowledge.prior.values()]))
