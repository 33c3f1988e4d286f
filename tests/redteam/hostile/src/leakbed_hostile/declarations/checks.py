"""Check hooks that try to carry data through the params they normalise, or to look around.

A check runs in a sandbox with one prior's knowledge (``leakbed.workers.inside.check``); what it returns is its
params as its model dumps them. ``params`` is frozen, but Python lets a hook write its ``__dict__`` anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, ClassVar

from pydantic import Field

from leakbed.plugin import Params, Setting
from leakbed_hostile.declarations.common import Declared


class CarryParams(Params):
    note: str = Field("", max_length=64, description="free text [text]")


class Carry(Declared):
    """Writes a digest of its prior's labels into ``note``: with two priors, each prior's lanes would get the
    other's ... if the two checks agreed, which they cannot without seeing both priors."""

    name: ClassVar[str] = "hostile-check-carry"
    params = CarryParams

    @classmethod
    def check(cls, params: Any, setting: Setting) -> str | None:
        labels = b"".join(setting.prior[u].y.tobytes() for u in sorted(setting.prior))
        object.__setattr__(params, "note", hashlib.sha256(labels).hexdigest()[:32])
        return None


class WidenParams(Params):
    k: int = Field(1, ge=1, le=10, description="a count [count]")


class Widen(Declared):
    """Returns ``k`` far past its declared bound (and the same for every prior)."""

    name: ClassVar[str] = "hostile-check-widen"
    params = WidenParams

    @classmethod
    def check(cls, params: Any, setting: Setting) -> str | None:  # noqa: ARG003 - the contract's signature
        object.__setattr__(params, "k", 10**6)
        return None


class Look(Declared):
    """Refuses with what it can see: the tree of its inputs and the prior its request names."""

    name: ClassVar[str] = "hostile-check-look"

    @classmethod
    def check(cls, params: Any, setting: Setting) -> str | None:  # noqa: ARG003 - the contract's signature
        root = "/leakbed/inputs"
        tree = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
        try:
            prior = json.load(open(os.path.join(root, "request.json"), encoding="utf-8")).get("prior")
        except OSError:
            prior = "?"
        return f"seen {json.dumps({'tree': tree, 'prior': prior, 'users': len(setting.prior)})}"
