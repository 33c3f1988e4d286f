"""An editable plugin whose package holds a link to ``/`` (and one to the run folder): it reads through them, and
lists what its sandbox holds (its mount table and the files of its root)."""

from __future__ import annotations

import os
from typing import ClassVar

from leakbed.plugin import Attack, AttackContext, NoParams, Outputs
from leakbed_hostile_sandbox.common import ranking, with_evidence

HERE = os.path.dirname(os.path.abspath(__file__))


def _through(link: str) -> dict[str, object]:
    path = os.path.join(HERE, link)
    out: dict[str, object] = {"exists": os.path.lexists(path)}
    try:
        out["listing"] = sorted(os.listdir(path))[:50]
    except OSError as err:
        out["error"] = err.strerror
    return out


class HostileInner(Attack):
    name: ClassVar[str] = "hostile-inner"
    family = "reid"
    params = NoParams
    scorer = "reid"
    source = "leakbed's red team (tests/redteam/hostile_sandbox): links inside an editable plugin's package"

    def fit(self, ctx: AttackContext) -> None:
        self.found = {"here": HERE, "root": _through("escape"), "run": _through("run"),
                      "mountinfo": open("/proc/self/mountinfo").read().splitlines()}  # fmt: skip

    def predict(self, ctx: AttackContext) -> Outputs:
        return with_evidence(ranking(ctx, self.name), self.found)
