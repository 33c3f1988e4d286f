"""An enum of a million values, written the normal way (a ``Literal``): leakbed's params language holds at most 256
choices, so the introspection refuses it in one line naming the field; trusted code never receives the values.
(Building the model takes a few seconds: it has a module of its own, imported only where it is named.)"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from leakbed.plugin import Params
from leakbed_hostile.declarations.common import Declared

Million = Literal[tuple(f"v{i}" for i in range(1_000_000))]  # type: ignore[valid-type]


class MillionParams(Params):
    value: Million = Field("v0", description="one of a million [name]")  # type: ignore[valid-type]


class MillionEnum(Declared):
    name: ClassVar[str] = "hostile-decl-million"
    params = MillionParams
