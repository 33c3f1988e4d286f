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


SCHEMA_BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
                 ("minLength", "length ≥"), ("maxLength", "length ≤"), ("minItems", "length ≥"), ("maxItems", "length ≤"))


def _schema_type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "Literal[" + ", ".join(repr(v) for v in prop["enum"]) + "]"
    if "anyOf" in prop:
        return " | ".join(_schema_type(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return f"list[{_schema_type(prop.get('items', {}))}]"
    names = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "None"}
    return names.get(prop.get("type", ""), "any")


def schema_rows(schema: dict[str, Any], defaults: dict[str, Any], prefix: str = "") -> list[Row]:
    """Every leaf field of a declared params schema (a plugin known as data: its model's JSON schema and defaults),
    nested objects flattened into dotted keys."""
    defs = schema.get("$defs", {})
    out: list[Row] = []
    for name, prop in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        if "$ref" in prop or ("allOf" in prop and "$ref" in prop["allOf"][0]):
            ref = prop.get("$ref") or prop["allOf"][0]["$ref"]
            nested = defs.get(ref.rsplit("/", 1)[-1], {})
            out.extend(schema_rows({**nested, "$defs": defs}, defaults.get(name) or {}, f"{key}."))
            continue
        text, unit = split_unit(prop.get("description"))
        value = defaults.get(name)
        shown = repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")
        bounds = [f"{sign} {prop[attr]:g}" if isinstance(prop[attr], float) else f"{sign} {prop[attr]}"
                  for attr, sign in SCHEMA_BOUNDS if attr in prop]
        out.append(Row(key, _schema_type(prop), shown, unit, ", ".join(bounds), text))
    return out
