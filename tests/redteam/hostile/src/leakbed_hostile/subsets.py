"""Hostile class sets: the honest twin's scores (``attacks.HostileHonest``), returned over classes the attack chose.

On the old scorer AP was averaged over the classes an attack returned, so each of these raised its score without
any new signal: the referee now scores every user it holds, a user left out at chance, a stray or repeated one
ignored (``leakbed.referee.coverage.ClassCoverage``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from leakbed.plugin import AttackContext, Outputs
from leakbed_hostile.attacks import HostileHonest
from leakbed_hostile.common import with_evidence


def confidence(scores: np.ndarray) -> np.ndarray:
    """Per class: how far its column's top n/k scores stand above the rest (in the column's standard deviations),
    where n/k is how many updates a user sends on average: a column that singles out about that many updates is one
    the attack ranks with confidence."""
    n, k = scores.shape
    if not n or not k:
        return np.zeros(k)
    top = max(1, n // k)
    ranked = np.sort(scores, axis=0)[::-1]
    rest = ranked[top:].mean(axis=0) if n > top else np.zeros(k)
    return (ranked[:top].mean(axis=0) - rest) / (scores.std(axis=0) + 1e-12)


class HostileOneUser(HostileHonest):
    """Only its most confident user's column (75.2 AP became 100.0 in the old headline table, ``n_users 1``)."""

    name: ClassVar[str] = "hostile-one-user"
    source = "leakbed's red team (tests/redteam): the most confident user alone"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = super().predict(ctx)
        best = int(np.argmax(confidence(out["scores"])))
        kept = {**out, "classes": out["classes"][[best]], "scores": out["scores"][:, [best]]}
        return with_evidence(kept, {"user": str(out["classes"][best]), "of": int(len(out["classes"]))})


class HostileNoClasses(HostileHonest):
    """An empty class list: every row, no column."""

    name: ClassVar[str] = "hostile-no-classes"
    source = "leakbed's red team (tests/redteam): no class at all"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = super().predict(ctx)
        empty = {**out, "classes": np.asarray([], dtype=str), "scores": np.zeros((len(out["ids"]), 0))}
        return with_evidence(empty, {"of": int(len(out["classes"]))})


class HostileDuplicateClasses(HostileHonest):
    """Its most confident user's column under every column's place (the old mean counted it once per copy)."""

    name: ClassVar[str] = "hostile-dup-classes"
    source = "leakbed's red team (tests/redteam): one class repeated"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = super().predict(ctx)
        k = len(out["classes"])
        best = int(np.argmax(confidence(out["scores"])))
        copies = {**out, "classes": out["classes"][[best] * k], "scores": out["scores"][:, [best] * k]}
        return with_evidence(copies, {"user": str(out["classes"][best]), "copies": k})


class HostileStrayClasses(HostileHonest):
    """Its less confident half of the users renamed to users it was never told about (the old scorer skipped a
    column without positives, so the mean ran over the confident half), and a few more invented ones."""

    name: ClassVar[str] = "hostile-stray-classes"
    source = "leakbed's red team (tests/redteam): classes it was not told about"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = super().predict(ctx)
        conf = confidence(out["scores"])
        weak = np.argsort(conf)[: len(conf) // 2]
        classes = out["classes"].astype(object)
        classes[weak] = [f"stray-{i}" for i in range(len(weak))]
        invented = np.asarray([f"ghost-{i}" for i in range(3)], dtype=object)
        scores = np.concatenate([out["scores"], np.full((len(out["ids"]), 3), -1.0)], axis=1)
        stray = {**out, "classes": np.concatenate([classes, invented]).astype(str), "scores": scores}
        return with_evidence(stray, {"renamed": int(len(weak)), "invented": 3})
