"""Hostile plugin numbers: reply headers, budgets and the outputs another attack builds on.

- ``hostile-huge-seconds``, ``-negative-seconds``, ``-nan-seconds``: ``fit`` writes its lane's reply by hand, a frame
  whose header says ``ok`` with ``seconds`` a 400-digit integer, -1, or NaN, then waits (on the old code the huge
  integer raised in the pool's lane thread, which died: the fit waited out its whole deadline).
- ``hostile-long-budget``: declares its own budget (``budget_seconds``, a million seconds by default) and never
  returns from ``fit`` (on the old code the budget was honoured past the run's task deadline).
- ``hostile-bad-ranking``: a closed-world attacker (family ``reid``) whose outputs have one score per update, not one
  per update and class; ``metadata`` builds on every closed-world attacker (on the old code it crashed on them and
  the report blamed ``metadata``).
"""

from __future__ import annotations

import os
import struct
import time
from typing import ClassVar

import numpy as np

from leakbed.plugin import Attack, AttackContext, Outputs, Params
from leakbed_hostile.common import ranking, reply_fd

MAGIC, PREFIX = b"LBF1", struct.Struct(">4sIQ")  # leakbed's frame (workers.frames), as an attacker reads it


def reply_raw(header: bytes) -> None:
    """A whole reply frame with ``header`` as it is (JSON that Python's own writer would refuse), no body."""
    fd = reply_fd()
    view = memoryview(PREFIX.pack(MAGIC, len(header), 0) + header)
    while view:
        view = view[os.write(fd, view) :]


class Numbers(Attack):
    source = "leakbed's red team (tests/redteam): hostile plugin numbers"
    threat = "hostile plugin code in its lane: the frames it writes, the budget it declares, the outputs it returns"
    scorer = "reid"
    header: ClassVar[bytes] = b""

    def fit(self, ctx: AttackContext) -> None:
        reply_raw(self.header)
        time.sleep(3600)  # the lane is ended by trusted code, which refused the header

    def predict(self, ctx: AttackContext) -> Outputs:
        return ranking(ctx, {}, self.name)


class HostileHugeSeconds(Numbers):
    name: ClassVar[str] = "hostile-huge-seconds"
    header = b'{"ok": true, "seconds": ' + b"9" * 400 + b', "pid": 1}'


class HostileNegativeSeconds(Numbers):
    name: ClassVar[str] = "hostile-negative-seconds"
    header = b'{"ok": true, "seconds": -1, "pid": 1}'


class HostileNanSeconds(Numbers):
    name: ClassVar[str] = "hostile-nan-seconds"
    header = b'{"ok": true, "seconds": NaN, "pid": 1}'


class LongBudget(Params):
    budget_seconds: float = 1_000_000.0  # its own deadline per task [s]: longer than any run allows


class HostileLongBudget(Numbers):
    name: ClassVar[str] = "hostile-long-budget"
    params = LongBudget
    budget = "budget_seconds"

    def fit(self, ctx: AttackContext) -> None:
        time.sleep(3600)


class HostileBadRanking(Numbers):
    name: ClassVar[str] = "hostile-bad-ranking"
    family = "reid"

    def fit(self, ctx: AttackContext) -> None:
        pass

    def predict(self, ctx: AttackContext) -> Outputs:
        out = ranking(ctx, {}, self.name)
        return {**out, "scores": np.asarray(out["scores"])[:, 0].copy()}  # one number per update: not a ranking
