"""Profile prior: single out devices whose updates fit a curated profile dataset (seed 001 §5.2.2
(iii), §6.1.1 "Attacking using profile prior", Figure 5).

Instead of data about a user, the attacker curates D^profile, examples of interest (here every
prior example of one class, e.g. all "guitars"), and treats it as one more identity of the
re-identification attack: each round it replays the device update on the round's global model
with random profile subsets of a device's typical size (``updates_per_round`` profile updates),
then trains the re-identification MLP (seed 001 §4.3) to tell profile updates from its known
users' shadow updates. Anonymous updates are ranked by P[profile]; the referee turns the ranking
into the top-k users and precision@k against the share of users that fit the profile.

Threat model: the honest-but-curious server (seed 001 §4.1); the profile data carries no identity.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from attacks.reidentify import fit_score
from attacks.suite import AttackSpec, Needs, register
from core.data.corpus import UserData
from core.models import build_model
from core.store import UpdateStore
from core.training import TrainConfig, load_arrays, local_update, pick_device, state_arrays
from core.updates import delta_vector

KIND = "profile"
PROFILE = "<profile>"


def profile_data(knowledge: AttackerKnowledge) -> UserData:
    """Every prior example of the target class, pooled over users (identities dropped)."""
    k = knowledge.attack.profile.target_class
    if knowledge.corpus_meta.task != "multiclass" or k >= knowledge.corpus_meta.num_classes:
        raise ValueError(f"profile target_class {k} is not a class of this multiclass corpus")
    parts = [d.take(np.flatnonzero(d.y == k)) for _, d in sorted(knowledge.prior.items())]
    parts = [p for p in parts if len(p)]
    if not parts:
        raise ValueError(f"no prior example of class {k} to build the profile from")
    return UserData(
        np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]), np.concatenate([p.t for p in parts])
    )


def on_round(store: UpdateStore, knowledge: AttackerKnowledge, snapshot: RoundSnapshot) -> None:
    """Profile updates on this round's global model, stored next to the shadow updates."""
    data = profile_data(knowledge)
    size = int(np.median([len(d) for d in knowledge.prior.values()]))
    cfg = TrainConfig(**{k: snapshot.train_config[k] for k in ("epochs", "batch_size", "lr", "optimizer", "momentum")})
    device = pick_device(knowledge.device)
    model = build_model(knowledge.model, knowledge.corpus_meta)
    rng = np.random.default_rng([knowledge.seed, snapshot.round, 0x9F0F])
    vectors = []
    for n in range(knowledge.attack.profile.updates_per_round):
        subset = data.take(rng.choice(len(data), min(size, len(data)), replace=False))
        load_arrays(model, snapshot.arrays)
        seed = zlib.crc32(f"{knowledge.seed}/{snapshot.round}/{n}/profile".encode())
        torch.manual_seed(seed)
        local_update(model, subset, knowledge.corpus_meta.task, cfg, seed=seed, device=device)
        vectors.append(delta_vector(snapshot.arrays, state_arrays(model), knowledge.keys))
    store._write(KIND, f"r{snapshot.round:06d}", {"vectors": np.stack(vectors)})


def read_profile(store: UpdateStore) -> np.ndarray:
    files = sorted((store.root / KIND).glob("r*.npz"))
    if not files:
        raise ValueError("no profile updates in the store (profile on_round never ran)")
    parts = []
    for f in files:
        with np.load(f) as z:
            parts.append(z["vectors"])
    return np.concatenate(parts)


def fit(store: UpdateStore, knowledge: AttackerKnowledge) -> None:
    """Re-identification MLP over {known users' shadow updates, profile updates}; P[profile] per update."""
    x_users, _, _ = store.read_shadow()
    x_prof = read_profile(store)
    x = np.concatenate([x_users, x_prof])
    y = np.asarray(["<user>"] * len(x_users) + [PROFILE] * len(x_prof))
    anon = store.read_anon()
    scores = fit_score("mlp", knowledge.attack, knowledge.seed, x, y, anon["vectors"])
    col = list(scores.classes).index(PROFILE)
    store.write_result(
        "profile",
        {
            "ids": anon["ids"],
            "rounds": anon["round"],
            "scores": scores.scores[:, col],
            "target_class": np.asarray(knowledge.attack.profile.target_class),
        },
    )


register(AttackSpec("profile", fit=fit, on_round=on_round, needs=Needs(tasks=frozenset({"multiclass"}), profile_class=True)))
