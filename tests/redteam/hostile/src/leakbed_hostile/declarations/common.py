"""The frame of the declaration routes' attacks: a plain random ranking (they are meant to be refused before any
round; if one ever runs, it scores at chance)."""

from __future__ import annotations

from leakbed.plugin import Attack, AttackContext, Outputs
from leakbed_hostile.common import ranking

URL = "http://127.0.0.1:47311/leakbed-hostile-ref"  # the red team listens here (tests/redteam/test_declarations.py)
FIFO = "/tmp/leakbed-hostile-ref.fifo"  # the red team makes this FIFO: opening it to read would block


class Declared(Attack):
    scorer = "reid"
    source = "leakbed's red team (tests/redteam): a hostile declaration"
    threat = "hostile plugin code: its declaration and its check"

    def predict(self, ctx: AttackContext) -> Outputs:
        return ranking(ctx, {}, self.name)
