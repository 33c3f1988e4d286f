"""The attacker's knowledge: its prior data about the users it targets and the model it can rebuild.

Threat model (seed 001 §4.1): the honest-but-curious server holds limited prior data
D_u^prior for each known user u, the global model of every round and the training config it
sent; it never sees a device's private data, user id, node id or arrival order. The knowledge
carries the prior as data (never the recipe that made it), the corpus' shape, the model and
attack settings, and a seed of the attacker's own (one-way from the experiment seed).

On disk it is a JSON file and one ``.npz`` of arrays (no pickle), written by trusted code into the run's
inputs (the store every lane of the prior reads, mounted read-only in its sandbox). It carries nothing of how
the attacks run (workers, addresses, TLS) and no attack's parameters: a lane is given its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core.config import ModelConfig
from leakbed.core.data.corpus import Corpus, UserData

KNOWLEDGE_JSON = "knowledge.json"
KNOWLEDGE_ARRAYS = "knowledge.npz"


@dataclass(frozen=True)
class AttackerKnowledge:
    prior: dict[str, UserData]  # identity -> that user's prior data
    corpus_meta: Corpus  # task, classes, input shape, vocabulary; no users
    model: ModelConfig
    keys: list[str]  # parameters that represent an update
    seed: int  # the attacker's own seed (core.derive), not the experiment's
    device: str = "auto"
    shadow_batch_users: int = 64  # attack.shadow_batch_users: how the attacker batches its shadow training

    def save(self, folder: Path) -> None:
        """Write the knowledge into ``folder`` (the run's store)."""
        arrays: dict[str, np.ndarray] = {}
        users = []
        for i, (user, data) in enumerate(self.prior.items()):
            arrays |= {f"{i}/x": data.x, f"{i}/y": data.y, f"{i}/t": data.t}
            arrays |= {f"{i}/attr/{k}": v for k, v in data.attrs.items()}
            users.append({"id": user, "attrs": list(data.attrs)})
        meta = self.corpus_meta
        doc = {
            "users": users,
            "corpus": {"name": meta.name, "task": meta.task, "num_classes": meta.num_classes,
                       "input_shape": list(meta.input_shape), "vocab": list(meta.vocab) if meta.vocab else None},
            "model": self.model.model_dump(mode="json"),
            "shadow_batch_users": self.shadow_batch_users,
            "keys": self.keys,
            "seed": self.seed,
            "device": self.device,
        }
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / KNOWLEDGE_ARRAYS).open("wb") as f:
            named: dict[str, Any] = arrays  # numpy's stub would read a key of **arrays as its allow_pickle flag
            np.savez(f, **named)
        (folder / KNOWLEDGE_JSON).write_text(json.dumps(doc), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> AttackerKnowledge:
        doc = json.loads((folder / KNOWLEDGE_JSON).read_text(encoding="utf-8"))
        with np.load(folder / KNOWLEDGE_ARRAYS, allow_pickle=False) as z:
            prior = {
                u["id"]: UserData(z[f"{i}/x"], z[f"{i}/y"], z[f"{i}/t"], {k: z[f"{i}/attr/{k}"] for k in u["attrs"]})
                for i, u in enumerate(doc["users"])
            }
        c = doc["corpus"]
        corpus = Corpus(c["name"], c["task"], c["num_classes"], tuple(c["input_shape"]), {},
                        tuple(c["vocab"]) if c["vocab"] is not None else None)
        return cls(
            prior=prior,
            corpus_meta=corpus,
            model=ModelConfig.model_validate(doc["model"]),
            keys=list(doc["keys"]),
            seed=int(doc["seed"]),
            device=str(doc["device"]),
            shadow_batch_users=int(doc.get("shadow_batch_users", 64)),
        )
