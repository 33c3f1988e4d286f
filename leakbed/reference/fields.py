"""Rows of a reference table from a pydantic model: every field with its default, unit, bound and description.

The unit is the bracketed tail of a field's description (``"users in the population [count]"``), the
convention every config and plugin params model follows; bounds come from the field's constraints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from leakbed.core.param_schema import ParamField
from leakbed.core.tables import markdown_table

UNIT = re.compile(r"^(?P<text>.*?)\s*\[(?P<unit>[^\[\]]+)\]\.?\s*$", re.S)
BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"), ("max_length", "length ≤"))


@dataclass(frozen=True)
class Row:
    """One option of a reference table."""

    key: str
    type: str
    default: str
    unit: str
    bound: str
    description: str


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not getattr(annotation, "__args__", None) else None
    text = text or str(annotation)
    return re.sub(r"\b(?:typing|core\.config|pydantic\.\w+)\.", "", text).replace("NoneType", "None")


def _bound(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        for attr, sign in BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "(table)"
    return repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")


def split_unit(description: str | None) -> tuple[str, str]:
    """(description without its unit, the unit), or ``(description, "")`` when it names none."""
    match = UNIT.match(description or "")
    return (match["text"], match["unit"]) if match else (description or "", "")


def rows(model: type[BaseModel], prefix: str = "") -> list[Row]:
    """Every leaf field of ``model``, nested models flattened into dotted keys."""
    out: list[Row] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.extend(rows(annotation, f"{key}."))
            continue
        text, unit = split_unit(info.description)
        out.append(Row(key, _type_name(annotation), _default(info), unit, _bound(info), text))
    return out


def table(found: list[Row]) -> str:
    """A markdown table of ``found``."""
    rows = [[f"`{r.key}`", f"`{r.type}`", f"`{r.default}`", r.unit, r.bound, r.description] for r in found]
    return markdown_table(["option", "type", "default", "unit", "bound", "description"], rows)


def param_rows(fields: tuple[ParamField, ...], prefix: str = "") -> list[Row]:
    """Every leaf field of a declared params table (a plugin known as data, in leakbed's params language: its
    fields, each with its default, unit and bounds), nested tables flattened into dotted keys."""
    out: list[Row] = []
    for f in fields:
        key = f"{prefix}{f.name}"
        if f.type == "table":
            out.extend(param_rows(f.fields, f"{key}."))
            continue
        out.append(Row(key, param_type(f), _shown(f.default), f.unit, param_bounds(f), f.description))
    return out


def param_type(f: ParamField) -> str:
    """A declared field's type as the docs write it: ``int``, ``list[str]``, ``Literal['a', 'b']``, ``int | None``."""
    text = f"Literal[{', '.join(repr(c) for c in f.choices)}]" if f.choices is not None else f.scalar
    text = f"list[{text}]" if f.type == "list" else text
    return f"{text} | None" if f.optional else text


def param_bounds(f: ParamField) -> str:
    """A declared field's bounds and lengths: ``≥ 1, ≤ 1000``, ``length ≤ 64``."""
    signs = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"), ("max_length", "length ≤"))
    parts = []
    for attr, sign in signs:
        value = getattr(f, attr)
        if value is not None:
            parts.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(parts)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")
