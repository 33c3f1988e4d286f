"""Cross-modal matching: link an anonymous image update to a user known only by text (seed 001
§4.3 Eq. 7, Fig. 3c; §5.2.2 (iv); §6.1.1 "Cross-modal attacks").

The attacker's prior about each known user is text (captions of their prior images, see
``attacks.text_embed``), embedded as φ_u, the mean sentence embedding. The matcher is the
Siamese network with two *different* FC-128 ReLU encoders, one for Δw and one for φ, into a
common 128-d space, then L1 distance and FC-1 sigmoid (BCE, RMSprop 1e-3). To learn the link the
attacker needs some labelled (update, text) pairs: for a seeded share of known users
(``paired_fraction``) it also holds the prior images and computes shadow updates; the other users
are text-only, so on them the attack is purely cross-modal. The referee scores balanced
(update, user) pairs (chance AP = 0.5) over all users and over text-only users apart.

Threat model: the honest-but-curious server (seed 001 §4.1) with text about every known user and
images of the paired ones; it never sees who sent an update.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs, Params
from leakbed.attacks.matching import Siamese, SiameseParams, embed, head_arrays, train
from leakbed.attacks.text_embed import captions, user_embeddings
from leakbed.core.attack_sets import PAIRED_FRACTION, paired_users


class CrossModalParams(Params):
    """Cross-modal matching (seed 001 §4.3, §6.1.1): a text prior about users, image updates."""

    encoder: Literal["minilm", "tfidf"] = Field(
        "minilm", description="sentence encoder of the text prior: all-MiniLM-L6-v2 (bundled weights) or TF-IDF [name]"
    )
    paired_fraction: float = Field(
        PAIRED_FRACTION,
        gt=0.0,
        lt=1.0,
        description="share of known users whose images the attacker also holds to train the matcher; the others are "
        "text-only [fraction]",
    )
    siamese: SiameseParams = Field(SiameseParams(), description="the Siamese matching network (seed 001 §4.3) [table]")


class CrossModal(Attack):
    name: ClassVar[str] = "cross-modal"
    params = CrossModalParams
    # the matcher reads image updates and captions written from single class labels
    needs = Needs(modality="image", tasks=frozenset({"multiclass"}))
    source = "seed 001 §4.3 Eq. 7, Fig. 3c; §5.2.2 (iv); §6.1.1"
    threat = (
        "the honest-but-curious server: anonymous image updates; text about every known user and images of the paired "
        "ones (its prior data); never who sent an update"
    )
    scorer = "cross-modal"

    def predict(self, ctx: AttackContext) -> Outputs:
        cfg, knowledge = ctx.params, ctx.knowledge
        if knowledge.corpus_meta.task != "multiclass":
            raise ValueError("cross-modal matching needs labelled image data (multiclass task)")
        prior = {u: captions(d, knowledge.corpus_meta) for u, d in sorted(knowledge.prior.items())}
        users, phi = user_embeddings(prior, cfg.encoder)
        paired = paired_users(users, ctx.seed, cfg.paired_fraction)
        x, labels, _ = ctx.store.read_shadow()
        keep = np.isin(labels, paired)  # text-only users' images (and so their shadow updates) are not held
        x, labels = x[keep], labels[keep]
        col = {u: k for k, u in enumerate(users)}
        owner = np.asarray([col[u] for u in labels])

        def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            half = cfg.siamese.pairs // 2
            i = rng.integers(0, len(x), 2 * half)
            j = owner[i].copy()
            other = rng.integers(0, len(users) - 1, half)
            j[half:] = other + (other >= owner[i[half:]])  # any other user
            same = np.r_[np.ones(half), np.zeros(half)].astype(np.float32)
            return i, j, same

        build = partial(Siamese, x.shape[1], phi.shape[1], shared=False)  # built by train, after seeding
        model = train(build, x, phi, draw, cfg.siamese, ctx.seed)
        anon = ctx.store.read_anon()
        return {
            "ids": anon["ids"],
            "rounds": anon["round"],
            "emb": embed(model.enc_a, anon["vectors"]),
            "users": np.asarray(users, dtype=str),
            "user_emb": embed(model.enc_b, phi),
            "paired": np.asarray(paired, dtype=str),
            "encoder": np.asarray(cfg.encoder),
            **head_arrays(model),
        }
