"""Declarations forged on their way out of the introspection: this module's import-time code wraps the JSON encoder
the introspection's reply goes through (in the program ``leakbed.workers.inside.introspect``, which runs as
``__main__``) and rewrites its own attacks' declarations, whatever leakbed made of their params models. Trusted
code receives them as data, exactly as a compromised sandbox would write them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from leakbed.plugin import Params
from leakbed_hostile.declarations.common import FIFO, URL, Declared


class KParams(Params):
    k: int = Field(1, ge=1, le=10, description="a count [count]")


def _field(name: str, **kw: object) -> dict:
    return {"name": name, "type": "int", "default": 1, **kw}


def _deep(levels: int) -> dict:
    field = _field("x")
    for i in range(levels):
        field = {"name": f"t{i}", "type": "table", "fields": [field]}
    return {"fields": [field]}


FORGED: dict[str, Callable[[dict], dict]] = {
    # the old language's way and the new one's: a reference to a URL, in the table and in a field
    "hostile-decl-ref-url": lambda d: {**d, "params_schema": {"$ref": URL},
                                       "params": {"$ref": URL, "fields": [_field("k", **{"$ref": URL})]}},
    "hostile-decl-ref-file": lambda d: {**d, "params_schema": {"$ref": f"file://{FIFO}"},
                                        "params": {"fields": [_field("k", **{"$ref": f"file://{FIFO}"})]}},
    "hostile-decl-pattern": lambda d: {**d, "params": {"fields": [
        {"name": "word", "type": "str", "default": "a", "pattern": "^(a+)+$"}]}},
    "hostile-decl-huge": lambda d: {**d, "params": {"fields": [_field(f"f{i}") for i in range(5000)]}},
    "hostile-decl-deep": lambda d: {**d, "params": _deep(7)},
    "hostile-decl-enum": lambda d: {**d, "params": {"fields": [
        {"name": "v", "type": "str", "default": "v0", "choices": [f"v{i}" for i in range(20_000)]}]}},
    "hostile-decl-escape": lambda d: {**d, "params": {"fields": [
        _field("k\x1b]0;leakbed: all attacks pass\x07\x1b[2J", description="\x1b[31mred\x1b[0m [count]")],
        "\x1b[2J\nleakbed: all attacks pass": 1}},
}


def _patch() -> None:
    """In the introspection's own process only: wrap the JSON encoder its reply goes through (``json.dumps``, which
    the reply's writer looks up when it writes), and forge this module's declarations in the document it encodes."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is None or spec.name != "leakbed.workers.inside.introspect" or getattr(json.dumps, "hostile", False):
        return
    original = json.dumps

    def dumps(doc: object, *args: object, **kwargs: object) -> str:
        if isinstance(doc, dict) and isinstance(doc.get("declarations"), dict):
            for name, forge in FORGED.items():
                if name in doc["declarations"]:
                    doc["declarations"][name] = forge(doc["declarations"][name])
        return original(doc, *args, **kwargs)

    dumps.hostile = True  # type: ignore[attr-defined]
    json.dumps = dumps


_patch()


class RefUrl(Declared):
    name: ClassVar[str] = "hostile-decl-ref-url"
    params = KParams


class RefFile(Declared):
    name: ClassVar[str] = "hostile-decl-ref-file"
    params = KParams


class Pattern(Declared):
    name: ClassVar[str] = "hostile-decl-pattern"
    params = KParams


class Huge(Declared):
    name: ClassVar[str] = "hostile-decl-huge"
    params = KParams


class Deep(Declared):
    name: ClassVar[str] = "hostile-decl-deep"
    params = KParams


class Enum(Declared):
    name: ClassVar[str] = "hostile-decl-enum"
    params = KParams


class Escape(Declared):
    name: ClassVar[str] = "hostile-decl-escape"
    params = KParams
