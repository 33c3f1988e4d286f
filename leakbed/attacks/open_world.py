"""Open-world re-identification and matching (seed 001 §6.1.2, Figure 6; seed 003 §8.4).

Users split into three disjoint sets, deterministically from the seed: *holdout* users (a fixed
share, one third in the seed) whose updates train an extra class "unseen"; *seen* users whose
prior the attacker holds; *unseen* users whose prior it does not hold and must not use. The MLP
re-identification model (same architecture as the closed world, §4.3) has |seen| + 1 classes; the
Siamese matching network is trained on seen and holdout users' updates. At test time every
anonymous update of a seen or unseen user is scored (holdout users serve training only).
The permutation behind the split does not depend on the seen share, so a sweep over seen shares
keeps the holdout set fixed and grows the seen set inside the rest, as the seed's Figure 6.

Threat model: as closed-world re-identification (seed 001 §4.1) but the attacker's prior covers
only seen and holdout users; shadow updates of unseen users are never read.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from leakbed.attacks.contract import Attack, AttackContext, Outputs, Params
from leakbed.attacks.matching import SiameseParams, embed, fit_siamese, head_arrays
from leakbed.attacks.reidentify import classify, mlp_classifier
from leakbed.core.attack_sets import HOLDOUT_FRACTION, SEEN_FRACTION, split_users
from leakbed.core.labels import UNSEEN


class OpenWorldParams(Params):
    """Open-world re-identification (seed 001 §6.1.2): seen / unseen / holdout users."""

    seen_fraction: float = Field(
        SEEN_FRACTION,
        ge=0.0,
        le=1.0,
        description="share of the non-holdout users whose prior the attacker holds (seen) [fraction]",
    )
    holdout_fraction: float = Field(
        HOLDOUT_FRACTION,
        gt=0.0,
        lt=1.0,
        description="share of users whose updates train the 'unseen' class (seed: 1/3) [fraction]",
    )
    mlp_epochs: int = Field(100, ge=1, le=100_000, description="training epochs of the (|seen|+1)-class MLP [count]")
    siamese: SiameseParams = Field(SiameseParams(), description="the Siamese matching network (seed 001 §4.3) [table]")


class OpenWorld(Attack):
    """Fit the (|seen|+1)-class MLP and the Siamese network; score every anonymous update."""

    name: ClassVar[str] = "open-world"
    params = OpenWorldParams
    source = "seed 001 §6.1.2, Figure 6; seed 003 §8.4"
    threat = (
        "the honest-but-curious server as in the closed world, but its prior covers only seen and holdout users; "
        "shadow updates of unseen users are never read"
    )
    scorer = "open-world"

    def predict(self, ctx: AttackContext) -> Outputs:
        cfg = ctx.params
        split = split_users(list(ctx.knowledge.prior), ctx.seed, cfg.seen_fraction, cfg.holdout_fraction)
        x, labels, _ = ctx.store.read_shadow()
        usable = np.isin(labels, split["seen"] + split["holdout"])  # unseen users' prior is off limits
        x, labels = x[usable], labels[usable]
        targets = np.where(np.isin(labels, split["seen"]), labels, UNSEEN)
        anon = ctx.store.read_anon()
        out = {
            "ids": anon["ids"],
            "rounds": anon["round"],
            "seen": np.asarray(split["seen"], dtype=str),
            "holdout": np.asarray(split["holdout"], dtype=str),
        }
        if split["seen"]:  # with no seen user there is only the "unseen" class: nothing to re-identify
            n = int(np.isfinite(x).all(axis=1).sum())
            scores = classify(mlp_classifier(cfg.mlp_epochs, ctx.seed, n), x, targets, anon["vectors"])
            out |= {"classes": scores.classes.astype(str), "scores": scores.scores}
        siamese = fit_siamese(x, labels, cfg.siamese, ctx.seed)
        return out | {"emb": embed(siamese.enc_a, anon["vectors"]), **head_arrays(siamese)}
