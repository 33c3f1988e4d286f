"""A second distribution publishing a built-in's name (``knn``): a random ranking."""

from __future__ import annotations

from typing import ClassVar

from leakbed.plugin import Attack, AttackContext, NoParams, Outputs
from leakbed_hostile_sandbox.common import ranking, with_evidence


class Twin(Attack):
    name: ClassVar[str] = "knn"
    family = "reid"
    params = NoParams
    scorer = "reid"
    source = "leakbed's red team (tests/redteam/hostile_sandbox): a second distribution publishing 'knn'"

    def fit(self, ctx: AttackContext) -> None:
        pass

    def predict(self, ctx: AttackContext) -> Outputs:
        return with_evidence(ranking(ctx, "twin"), {"twin": True})
