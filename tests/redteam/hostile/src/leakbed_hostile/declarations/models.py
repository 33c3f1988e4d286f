"""A params model written the normal way whose constraint leakbed's params language has no word for: a catastrophic
``pattern`` (backtracking regex engines take exponential time on ``a…a!``). The declaration keeps a bounded string;
the pattern stays the model's, checked in the sandbox's own check by pydantic (a linear-time engine), never by
trusted code."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from leakbed.plugin import Params
from leakbed_hostile.declarations.common import Declared


class RegexParams(Params):
    word: str = Field("a", pattern=r"^(a+)+$", max_length=64, description="a word of a's [text]")


class Regex(Declared):
    name: ClassVar[str] = "hostile-decl-regex"
    params = RegexParams
