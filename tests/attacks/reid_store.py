"""A synthetic update store for the re-identification suite's unit tests.

Every user has a characteristic direction in update space (its "bias"), shifted by its per-user
attribute and by its share of the profile class; shadow and anonymous updates are that direction
plus noise. ``shuffle`` seals a random owner for each anonymous update instead of the real one
(the control: nothing links an update to its sealed owner, so attacks must fall to chance).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.config import AttackConfig, ExperimentConfig, ModelConfig
from core.data.corpus import Corpus, UserData
from core.knowledge import AttackerKnowledge
from core.store import UpdateStore
from referee.context import ScoreContext
from referee.scorers import params_for, score_one
from referee.seal import Sealer
from referee.truth import Referee
from workers.inside import worker

CLASSES = 6
torch.set_num_threads(1)  # tiny models: threads only contend on a shared machine


@dataclass
class Fixture:
    store: UpdateStore
    referee: Referee
    knowledge: AttackerKnowledge
    users: list[str]
    attr: dict[str, int]
    share: dict[str, np.ndarray]


def make(
    tmp: Path,
    attack: AttackConfig,
    users: int = 15,
    rounds: int = 8,
    per_round: int = 8,
    dim: int = 48,
    noise: float = 0.8,
    shuffle: bool = False,
    seed: int = 0,
) -> Fixture:
    rng = np.random.default_rng(seed)
    ids = [f"user{u:02d}" for u in range(users)]
    attr = {u: int(rng.integers(0, 3)) for u in ids}
    share = {u: rng.dirichlet(np.full(CLASSES, 0.4)) for u in ids}
    class_dirs = rng.normal(size=(CLASSES, dim))
    attr_dirs = rng.normal(size=(3, dim))
    means = {u: rng.normal(size=dim) * 0.7 + attr_dirs[attr[u]] * 0.7 + share[u] @ class_dirs for u in ids}

    def update(u: str) -> np.ndarray:
        v = means[u] + rng.normal(scale=noise, size=dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    store = UpdateStore(tmp / "store")
    sealer = Sealer(tmp / "referee")
    for r in range(1, rounds + 1):
        store.write_shadow(r, ids, np.stack([update(u) for u in ids]))
        chosen = [ids[k] for k in rng.choice(users, per_round, replace=False)]
        upd_ids = [f"r{r}-{rng.integers(1 << 30):x}" for _ in chosen]
        store.write_anon(r, "b0", upd_ids, np.stack([update(u) for u in chosen]), np.full(per_round, 10))
        for uid, u in zip(upd_ids, chosen, strict=True):
            sealed = ids[int(rng.integers(users))] if shuffle else u
            sealer.seal(uid, sealed, r, {"attr-interest": float(attr[sealed]), "label-share": share[sealed].tolist()})
        profile = [c @ class_dirs for c in np.eye(CLASSES)[[0] * 3]] + rng.normal(scale=noise, size=(3, dim))
        store._write(
            "profile", f"r{r:06d}", {"vectors": (profile / np.linalg.norm(profile, axis=1, keepdims=True)).astype(np.float32)}
        )
    prior = {}
    for u in ids:
        y = rng.choice(CLASSES, 30, p=share[u])
        prior[u] = UserData(
            x=np.zeros((30, 1, 4, 4), np.float32),
            y=y.astype(np.int64),
            t=np.arange(30.0),
            attrs={"interest": np.full(30, attr[u]), "album": rng.integers(0, 4, 30)},
        )
    meta = Corpus("synthetic", "multiclass", CLASSES, (1, 4, 4), {})
    knowledge = AttackerKnowledge(prior, meta, ModelConfig(), attack, ["fc.weight"], seed)
    return Fixture(store, Referee.load(tmp / "referee"), knowledge, ids, attr, share)


def run_hooks(store: UpdateStore, knowledge: AttackerKnowledge, name: str, output: str = "", params: dict | None = None) -> dict:
    """Attack ``name``'s fit and predict hooks on ``store``, as a worker runs them (here in-process); the outputs
    are filed under ``output`` (default: the name) and returned."""
    ctx = worker.context(store, knowledge, name, output, params)
    attack = worker.registry.attack(name)()
    attack.fit(ctx)
    outputs = attack.predict(ctx)
    store.write_result(ctx.name, outputs)
    return outputs


def score_with(
    store: UpdateStore,
    referee: Referee,
    name: str,
    out: Path,
    cfg: ExperimentConfig,
    output: str = "",
    params: dict | None = None,
) -> dict:
    """The referee's score of attack ``name``'s outputs against ``referee``'s sealed truth (read back now)."""
    params_ = params_for(name, cfg.attack.params.get(name), params)
    ctx = ScoreContext(name, output or name, params_, Referee.load(referee.folder), store, cfg, "random", out)
    return score_one(name, ctx)


def fit(fx: Fixture, name: str, output: str = "", params: dict | None = None) -> dict[str, np.ndarray]:
    return run_hooks(fx.store, fx.knowledge, name, output, params)


def score(
    fx: Fixture, name: str, out: Path, cfg: ExperimentConfig | None = None, output: str = "", params: dict | None = None
) -> dict:
    cfg = cfg or ExperimentConfig(attack=fx.knowledge.attack)
    return score_with(fx.store, fx.referee, name, out, cfg, output, params)
