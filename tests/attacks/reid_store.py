"""A synthetic update store for the re-identification suite's unit tests, and the attack hooks run on it in-process.

Every user has a characteristic direction in update space (its "bias"), shifted by its per-user
attribute and by its share of the profile class; shadow and anonymous updates are that direction
plus noise. ``shuffle`` seals a random owner for each anonymous update instead of the real one
(the control: nothing links an update to its sealed owner, so attacks must fall to chance).

The hooks run here, in the test's process (unit tests of attack algorithms may import attack code; a run never
does, it runs them in a sandboxed lane, ``workers.pool``), the way a lane runs them: an ``AttackContext`` over a
read-only view of the store, a folder of the attack's own (``folder_of``), the outputs of the suite's attacks it
builds on and what it may know of them. Outputs are filed as the pool files them (``<outputs>/<name>.npz`` and
``<name>.given.npy``, the ids of every update in the store) and scored by the referee's ``score_one`` from the
attack's declaration (``attacks.registry.declare``) and its parameters checked against the declared schema.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from leakbed.attacks import registry
from leakbed.attacks.contract import AttackContext
from leakbed.core.config import AttackConfig, ExperimentConfig, ModelConfig
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.declaration import Declaration, check_params
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.store import UpdateStore
from leakbed.referee.context import ScoreContext
from leakbed.referee.scorers import score_one
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee

CLASSES = 6
torch.set_num_threads(1)  # tiny models: threads only contend on a shared machine


@functools.cache
def declare(name: str) -> Declaration:
    """Attack ``name``'s declaration, as the sandboxed introspection returns it (here taken in-process)."""
    return registry.declare(name)


def folder_of(store: UpdateStore, output: str) -> Path:
    """The attack's own folder (in a run: its lane's tmpfs) for the outputs filed as ``output``: beside the store."""
    folder = store.root.parent / "work" / output
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def outputs_of(store: UpdateStore) -> Path:
    """Where the outputs of the attacks on ``store`` are filed (the run's ``RunLayout.outputs``): beside the store."""
    return store.root.parent / "outputs"


def params_for(name: str, attack: AttackConfig, overrides: dict | None = None) -> dict:
    """Attack ``name``'s parameters as the run resolves them (``check_params``), with a study's ``overrides``."""
    table = {**attack.params.get(name, {}), **(overrides or {})}
    return check_params(declare(name), table, f"attack.params.{name}")


@dataclass
class Fixture:
    store: UpdateStore
    referee: Referee
    knowledge: AttackerKnowledge
    attack: AttackConfig
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
    profile_folder = UpdateStore(folder_of(store, "profile"))  # the profile attack's per-round updates: its own files
    for r in range(1, rounds + 1):
        store.write_shadow(r, ids, np.stack([update(u) for u in ids]))
        chosen = [ids[k] for k in rng.choice(users, per_round, replace=False)]
        upd_ids = [f"r{r}-{rng.integers(1 << 30):x}" for _ in chosen]
        store.write_anon(r, "b0", upd_ids, np.stack([update(u) for u in chosen]), np.full(per_round, 10))
        for uid, u in zip(upd_ids, chosen, strict=True):
            sealed = ids[int(rng.integers(users))] if shuffle else u
            sealer.seal(uid, sealed, r, {"attr-interest": float(attr[sealed]), "label-share": share[sealed].tolist()})
        profile = [c @ class_dirs for c in np.eye(CLASSES)[[0] * 3]] + rng.normal(scale=noise, size=(3, dim))
        profile_folder._write(
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
    knowledge = AttackerKnowledge(prior, meta, ModelConfig(), ["fc.weight"], seed)
    return Fixture(store, Referee.load(tmp / "referee"), knowledge, attack, ids, attr, share)


def context(
    store: UpdateStore,
    knowledge: AttackerKnowledge,
    name: str,
    attack: AttackConfig,
    output: str = "",
    params: dict | None = None,
) -> AttackContext:
    """The context a lane gives attack ``name``'s hooks: its parameters as the run resolves them (with a study's
    ``params`` overrides), a read-only view of the store, its own folder, and the suite's attacks it builds on (their
    outputs where filed, their parameters and score kind; leakbed's own, so ``builtin``)."""
    decl = declare(name)
    output = output or name
    upstream = decl.upstream(list(attack.suite), {n: declare(n) for n in attack.suite})
    outputs = outputs_of(store)
    return AttackContext(
        name=output,
        store=InputsView(store.root),
        knowledge=knowledge,
        params=registry.params_of(name, params_for(name, attack, params)),
        folder=folder_of(store, output),
        upstream={u: outputs / f"{u}.npz" for u in upstream},
        peers={u: {"params": params_for(u, attack), "score_kind": declare(u).score_kind, "builtin": True} for u in upstream},
    )


def file_outputs(store: UpdateStore, output: str, arrays: dict[str, np.ndarray]) -> Path:
    """The outputs as the pool files them (``<output>.npz``, no pickle) with the ids of every update the fit was
    given (``<output>.given.npy``: all of the store's)."""
    folder = outputs_of(store)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{output}.npz"
    np.savez(path, allow_pickle=False, **{k: np.asarray(v) for k, v in arrays.items()})
    np.save(folder / f"{output}.given.npy", np.asarray(store.anon_ids(), dtype=str), allow_pickle=False)
    return path


def run_hooks(
    store: UpdateStore,
    knowledge: AttackerKnowledge,
    name: str,
    attack: AttackConfig | None = None,
    output: str = "",
    params: dict | None = None,
) -> dict:
    """Attack ``name``'s fit and predict hooks on ``store``, as its lane runs them (here in-process); the outputs are
    filed under ``output`` (default: the name) and returned. ``attack``: the run's suite and parameters (default:
    ``name`` alone, with its defaults)."""
    attack = attack or AttackConfig(suite=[name])
    ctx = context(store, knowledge, name, attack, output, params)
    hooks = registry.attack(name)()
    hooks.fit(ctx)
    outputs = hooks.predict(ctx)
    file_outputs(store, ctx.name, outputs)
    return outputs


def score_with(
    store: UpdateStore,
    referee: Referee,
    name: str,
    out: Path,
    cfg: ExperimentConfig,
    output: str = "",
    params: dict | None = None,
    outputs: Path | None = None,
) -> dict:
    """The referee's score of attack ``name``'s outputs (filed as ``output`` in ``outputs``, default: where
    ``run_hooks`` files them) against ``referee``'s sealed truth (read back now), with the attack's declaration and
    its parameters as the run resolves them."""
    decl = declare(name)
    ctx = ScoreContext(
        attack=name,
        name=output or name,
        params=params_for(name, cfg.attack, params),
        scoring=decl.scoring,
        truth=Referee.load(referee.folder),
        store=store,
        cfg=cfg,
        rule="random",
        out=out,
        outputs_dir=outputs or outputs_of(store),
    )
    return score_one(decl, ctx)


def fit(fx: Fixture, name: str, output: str = "", params: dict | None = None) -> dict[str, np.ndarray]:
    return run_hooks(fx.store, fx.knowledge, name, fx.attack, output, params)


def score(
    fx: Fixture, name: str, out: Path, cfg: ExperimentConfig | None = None, output: str = "", params: dict | None = None
) -> dict:
    cfg = cfg or ExperimentConfig(attack=fx.attack)
    return score_with(fx.store, fx.referee, name, out, cfg, output, params)
