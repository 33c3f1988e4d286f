"""``hostile-import``: code that runs when its module is imported, whatever the params, in whatever process imports it.

On the old code a trusted process imported attack modules (to learn their parameters and scorers), as root, beside
the truth: a module-level wrap of the referee's sealing copied every owner into the attack store, where the lane read
them back. This module tries the same everywhere it is imported: it patches what it finds of leakbed's trusted side
in ``sys.modules`` (the sealer, the pool, the store, the shuffler, the truth store), and imports them when it can; it
walks the file system for the truth and the update-id key; it leaves a marker file in every folder it can write.
Its lane then reads back whatever the patches copied, and names those owners in its ranking.

What it did is kept in ``FOUND`` (and reported by its lane as ``evidence``).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from typing import ClassVar

from leakbed.plugin import Attack, AttackContext, Outputs
from leakbed_hostile.common import OWNERS_DROP, dry, hunt, leave_marks, owners_in, places, ranking, with_evidence

FOUND: dict = {"pid": os.getpid(), "uid": os.getuid(), "argv": sys.argv[:4], "patched": [], "imported": []}
TARGETS = (
    ("leakbed.referee.seal", "Sealer", "seal"),
    ("leakbed.referee.truth", "Referee", "load"),
    ("leakbed.workers.pool", "AttackPool", "_write_output"),
    ("leakbed.core.store", "UpdateStore", "write_result"),
    ("leakbed.server.shuffler", "Shuffler", "__init__"),
)


def _drops() -> list[str]:
    """Where a copied owner is written, for a later lane (or this one) to read."""
    return [os.getcwd()] if dry() else [p for p in places() if p not in ("/",)]


def _copy_owner(update_id: object, user_id: object) -> None:
    line = json.dumps({"update_id": str(update_id), "user_id": str(user_id)}) + "\n"
    for folder in _drops():
        try:
            with open(os.path.join(folder, OWNERS_DROP), "a", encoding="utf-8") as f:
                f.write(line)
        except OSError:
            continue


def _wrap(cls: type, method: str) -> None:
    original = getattr(cls, method)

    @functools.wraps(original)
    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - any signature
        if method == "seal" and len(args) >= 3:
            _copy_owner(args[1], args[2])
        if method in ("_write_output", "write_result"):  # another attack's results: rewritten at random
            for i, a in enumerate(args):
                if isinstance(a, dict) and "scores" in a:
                    import numpy as np

                    args = (*args[:i], {**a, "scores": np.random.default_rng(0).random(np.shape(a["scores"]))}, *args[i + 1 :])
        return original(*args, **kwargs)

    setattr(cls, method, spy)


def _patch() -> None:
    for module, cls_name, method in TARGETS:
        mod = sys.modules.get(module)
        if mod is None:
            try:
                mod = importlib.import_module(module)
                FOUND["imported"].append(module)
            except Exception:  # noqa: BLE001 - not reachable from here
                continue
        cls = getattr(mod, cls_name, None)
        if cls is not None and hasattr(cls, method):
            _wrap(cls, method)
            FOUND["patched"].append(f"{module}.{cls_name}.{method}")


try:
    _patch()
    FOUND["hunt"] = hunt(budget=4.0)
    FOUND["hunt"]["owners"] = len(FOUND["hunt"]["owners"])
    FOUND["marks"] = leave_marks("hostile-import at import time")
    FOUND["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("leakbed", "flwr"))
except Exception as err:  # noqa: BLE001 - a probe must not stop the import it rides on
    FOUND["error"] = f"{type(err).__name__}: {err}"


class HostileImport(Attack):
    """Reads back what its import-time code copied, and names those owners."""

    name: ClassVar[str] = "hostile-import"
    scorer = "reid"
    source = "leakbed's red team: import-time code (tests/redteam)"
    threat = "hostile plugin code run at import, in every process that imports its module"

    def predict(self, ctx: AttackContext) -> Outputs:
        owners: dict[str, str] = {}
        for folder in [*_drops(), str(ctx.store.root)]:
            try:
                with open(os.path.join(folder, OWNERS_DROP), encoding="utf-8") as f:
                    owners |= owners_in(f.read())
            except OSError:
                continue
        again = hunt(budget=4.0)
        owners |= again["owners"]
        doc = {**FOUND, "owners_read_back": len(owners), "hunt_in_lane": {**again, "owners": len(again["owners"])}}
        return with_evidence(ranking(ctx, owners, self.name), doc)
