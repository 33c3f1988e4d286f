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
from typing import ClassVar

import numpy as np
import torch
from pydantic import Field

from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs, Params, Setting
from leakbed.attacks.reidentify import classify, mlp_classifier
from leakbed.core.data.corpus import UserData
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import build_model
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore
from leakbed.core.training import TrainConfig, load_arrays, local_update, pick_device, state_arrays
from leakbed.core.updates import delta_vector

KIND = "profile"
PROFILE = "<profile>"


class ProfileParams(Params):
    """Profile prior (seed 001 §5.2.2, Figure 5): find devices whose updates fit a curated dataset."""

    target_class: int = Field(0, ge=0, le=1_000_000, description="class whose examples form the profile dataset [class index]")
    updates_per_round: int = Field(4, ge=1, le=1000, description="profile updates the attacker computes per round [count]")
    fit_ratio: float = Field(
        2.0,
        gt=0.0,
        le=1000.0,
        description="a user fits the profile when their share of the class is at least this multiple of the mean "
        "share over users [multiple]",
    )
    top_k: int = Field(10, ge=1, le=100_000, description="k of precision@k and of the top-users figure [users]")
    mlp_epochs: int = Field(100, ge=1, le=100_000, description="training epochs of the re-identification MLP [count]")


def profile_data(knowledge: AttackerKnowledge, k: int) -> UserData:
    """Every prior example of class ``k``, pooled over users (identities dropped)."""
    if knowledge.corpus_meta.task != "multiclass" or k >= knowledge.corpus_meta.num_classes:
        raise ValueError(f"profile target_class {k} is not a class of this multiclass corpus")
    parts = [d.take(np.flatnonzero(d.y == k)) for _, d in sorted(knowledge.prior.items())]
    parts = [p for p in parts if len(p)]
    if not parts:
        raise ValueError(f"no prior example of class {k} to build the profile from")
    return UserData(
        np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]), np.concatenate([p.t for p in parts])
    )


def profile_updates(store: UpdateStore, knowledge: AttackerKnowledge, params: ProfileParams, snapshot: RoundSnapshot) -> None:
    """Profile updates on this round's global model, stored next to the shadow updates; trained as the devices
    train (the round's training config, local steps included)."""
    data = profile_data(knowledge, params.target_class)
    size = int(np.median([len(d) for d in knowledge.prior.values()]))
    cfg = TrainConfig.from_config(snapshot.train_config)
    device = pick_device(knowledge.device)
    model = build_model(knowledge.model, knowledge.corpus_meta)
    rng = np.random.default_rng([knowledge.seed, snapshot.round, 0x9F0F])
    vectors = []
    for n in range(params.updates_per_round):
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
        raise ValueError("no profile updates in the attack's folder (profile on_round never ran)")
    parts = []
    for f in files:
        with np.load(f) as z:
            parts.append(z["vectors"])
    return np.concatenate(parts)


class Profile(Attack):
    """Re-identification MLP over {known users' shadow updates, profile updates}; P[profile] per update."""

    name: ClassVar[str] = "profile"
    params = ProfileParams
    needs = Needs(tasks=frozenset({"multiclass"}))
    source = "seed 001 §5.2.2 (iii), §6.1.1 'Attacking using profile prior', Figure 5"
    threat = "the honest-but-curious server: anonymous updates and a curated profile dataset that carries no identity"
    scorer = "profile"

    @classmethod
    def check(cls, params: ProfileParams, setting: Setting) -> str | None:
        k, corpus = params.target_class, setting.corpus
        if k >= corpus.num_classes:
            return f"attack.params.profile.target_class = {k}: {setting.source} has classes 0..{corpus.num_classes - 1}"
        if not any(np.any(d.y == k) for d in setting.prior.values()):
            return f"attack.params.profile.target_class = {k}: no user's prior holds an example of class {k} in {setting.source}"
        return None

    def on_round(self, ctx: AttackContext, snapshot: RoundSnapshot) -> None:
        profile_updates(ctx.workspace, ctx.knowledge, ctx.params, snapshot)

    def predict(self, ctx: AttackContext) -> Outputs:
        x_users, _, _ = ctx.store.read_shadow()
        x_prof = read_profile(ctx.workspace)
        x = np.concatenate([x_users, x_prof])
        y = np.asarray(["<user>"] * len(x_users) + [PROFILE] * len(x_prof))
        anon = ctx.store.read_anon()
        n = int(np.isfinite(x).all(axis=1).sum())
        scores = classify(mlp_classifier(ctx.params.mlp_epochs, ctx.seed, n), x, y, anon["vectors"])
        col = list(scores.classes).index(PROFILE)
        return {
            "ids": anon["ids"],
            "rounds": anon["round"],
            "scores": scores.scores[:, col],
            "target_class": np.asarray(ctx.params.target_class),
        }
