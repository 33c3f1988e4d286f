"""The attacker's knowledge: its prior data about the users it targets and the model it can rebuild.

Threat model (seed 001 §4.1): the honest-but-curious server holds limited prior data
D_u^prior for each known user u, the global model of every round and the training config it
sent; it never sees a device's private data, user id, node id or arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakbed.config import AttackConfig, ModelConfig
from leakbed.data.corpus import Corpus, UserData


@dataclass(frozen=True)
class AttackerKnowledge:
    prior: dict[str, UserData]  # identity -> that user's prior data
    corpus_meta: Corpus  # task, classes, input shape, vocabulary; no users
    model: ModelConfig
    attack: AttackConfig
    keys: list[str]  # parameters that represent an update
    seed: int
    device: str = "auto"
