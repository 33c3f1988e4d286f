"""A plugin's pydantic params model in leakbed's params language (``core.param_schema``), made inside the sandbox.

Runs only where plugin code runs (the introspection, ``workers.inside.introspect``): it reads the model's own JSON
schema (pydantic's, resolved against that schema's own ``$defs`` only) and keeps what the language can say.

- Types the language has no word for are refused in one line naming the field: a union other than ``X | None``, a
  dict, a tuple of fixed length, ``Any``, a model that is optional or nested deeper than ``MAX_DEPTH``, an alias.
- Constraints it has no word for (a string ``pattern``, ``multiple_of``, a ``format`` such as a path or a date,
  unique items) and the model's validators stay the model's: the attack is marked ``validates``, and its own
  check runs the model over the run's table in a sandbox before anything starts (``workers.checks``). Trusted
  code never evaluates them.
- A description's bracketed tail is its unit (``"neighbours [count]"``); a string or list longer than
  leakbed's caps (``MAX_TEXT``, ``MAX_ITEMS``) is capped there.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from leakbed.core.entry_points import PluginError
from leakbed.core.param_schema import MAX_CHOICES, MAX_DEPTH, MAX_ITEMS, MAX_TEXT, ParamField, ParamSchema, plain

SCALARS = {"boolean": "bool", "integer": "int", "number": "float", "string": "str"}
BOUNDS = {"minimum": "ge", "exclusiveMinimum": "gt", "maximum": "le", "exclusiveMaximum": "lt"}
IGNORED = {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"}
STRUCTURE = {"anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref", "$defs", "$dynamicRef", "prefixItems",
             "additionalProperties", "patternProperties", "propertyNames", "dependentSchemas", "unevaluatedProperties",
             "unevaluatedItems", "contains", "properties", "items", "type", "enum", "const", "required"}  # fmt: skip
LENGTHS = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems")}


class Refused(Exception):
    """A field the language cannot describe (its message names why)."""


def declared(model: type[BaseModel], owner: str, defaults: dict[str, Any]) -> tuple[ParamSchema, bool]:
    """``model`` as a ``ParamSchema`` and whether it checks more than the schema says (constraints beyond the
    language, validators: its own check must run); PluginError (one line, naming the field) where it cannot be."""
    try:
        schema = model.model_json_schema(mode="validation")
    except Exception as err:  # noqa: BLE001 - a model pydantic cannot describe is refused in one line
        raise PluginError(f"attack {owner!r}: its params model has no schema ({type(err).__name__})") from None
    if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
        raise PluginError(f"attack {owner!r}: its params model's schema is not an object")
    alias = _aliased(model, 1)
    if alias:
        raise PluginError(f"attack {owner!r}: params field {alias!r}: an alias is not in leakbed's params language")
    beyond = [False]
    defs = schema.get("$defs")
    fields = _fields(schema, defs if isinstance(defs, dict) else {}, defaults, owner, "", 1, beyond)
    try:
        out = ParamSchema(fields=fields)
    except ValidationError as err:
        raise PluginError(f"attack {owner!r}: params: {_first_error(err)}") from None
    return out, beyond[0] or _validators(model, 1)


def _fields(schema: dict, defs: dict, defaults: dict, owner: str, prefix: str, depth: int, beyond: list[bool]) -> list:
    out = []
    for name, prop in schema.get("properties", {}).items():
        where = f"{prefix}{name}"
        try:
            out.append(_field(name, prop, defs, defaults.get(name), owner, where, depth, beyond))
        except Refused as err:
            raise PluginError(f"attack {owner!r}: params field {where!r}: {err}") from None
        except ValidationError as err:
            raise PluginError(f"attack {owner!r}: params field {where!r}: {_first_error(err)}") from None
    return out


def _field(name: str, prop: dict, defs: dict, default: Any, owner: str, where: str, depth: int, beyond: list[bool]) -> ParamField:
    text, unit = split_unit(str(prop.get("description") or ""))
    optional = False
    prop = _resolved(prop, defs)
    if "anyOf" in prop:
        options = prop["anyOf"]
        others = [o for o in options if o != {"type": "null"}]
        if len(options) != 2 or len(others) != 1:
            raise Refused("a union other than 'X | None' is not in leakbed's params language")
        optional = True
        rest = {k: v for k, v in prop.items() if k != "anyOf"}
        prop = {**_resolved(others[0], defs), **{k: v for k, v in rest.items() if k not in IGNORED}}
        text, unit = (text, unit) if text or unit else split_unit(str(prop.get("description") or ""))
    if "properties" in prop:  # a nested model: a table of its own
        if optional:
            raise Refused("an optional table is not in leakbed's params language (give it a default instead)")
        if depth >= MAX_DEPTH + 1:
            raise Refused(f"tables nest deeper than {MAX_DEPTH} levels")
        _no_structure(prop, {"properties", "type", "required", "additionalProperties", "$defs"}, beyond)
        fields = _fields(prop, defs, default if isinstance(default, dict) else {}, owner, f"{where}.", depth + 1, beyond)
        return ParamField(name=name, type="table", fields=tuple(fields), description=text, unit=unit)
    kind, spec = _kind(prop, defs, beyond)
    if kind == "list":
        items = _resolved(prop.get("items", {}), defs)
        if "prefixItems" in prop or not items:
            raise Refused("a list names one item type (a tuple of fixed length, or items of any type, is not in the language)")
        item_kind, item_spec = _kind(items, defs, beyond)
        if item_kind == "list":
            raise Refused("a list of lists is not in leakbed's params language")
        if {"min_length", "max_length"} & set(item_spec):  # an item's own length: the model's to check
            beyond[0] = True
        spec = {**{k: v for k, v in item_spec.items() if k not in ("min_length", "max_length")}, **_lengths(prop, "array")}
        _no_structure(prop, {"type", "items"} | set(LENGTHS["array"]), beyond)
        return ParamField(name=name, type="list", items=item_kind, optional=optional, default=_as(item_kind, default),
                          description=text, unit=unit, **spec)  # fmt: skip
    return ParamField(name=name, type=kind, optional=optional, default=_as(kind, default), description=text, unit=unit, **spec)


def _kind(prop: dict, defs: dict, beyond: list[bool]) -> tuple[str, dict]:
    """A scalar's (or a list's) type and the constraints the language keeps: bounds, lengths, choices."""
    prop = _resolved(prop, defs)
    if "anyOf" in prop or "properties" in prop:
        raise Refused("a union or a table inside a list is not in leakbed's params language")
    choices = [prop["const"]] if "const" in prop else prop.get("enum")
    kind = prop.get("type")
    if choices is not None:
        if not isinstance(choices, list) or len(choices) > MAX_CHOICES:
            size = len(choices) if isinstance(choices, list) else "no list of"
            raise Refused(f"{size} choices; leakbed's params language holds at most {MAX_CHOICES}")
        kinds = {_json_type(c) for c in choices}
        if len(kinds) != 1 or None in kinds:
            raise Refused("choices of one type only (booleans, integers, numbers or strings)")
        kind = kind or next(iter(kinds))
        if kind == "number":
            choices = [float(c) for c in choices]
    if kind == "array":
        return "list", {}
    if kind not in SCALARS:
        raise Refused(f"type {kind or 'any'!r} is not in leakbed's params language (bool, int, float, str, a list of one "
                      "of them, a table)")
    spec: dict[str, Any] = {} if choices is None else {"choices": tuple(choices)}
    for key, bound in BOUNDS.items():
        if key in prop:
            if SCALARS[kind] not in ("int", "float"):
                raise Refused(f"{key} on a {SCALARS[kind]}")
            spec[bound] = prop[key]
    if kind == "string":
        spec |= _lengths(prop, "string")
    _no_structure(prop, {"type", "enum", "const", *BOUNDS, *LENGTHS.get(kind, ())}, beyond)
    return SCALARS[kind], spec


def _lengths(prop: dict, kind: str) -> dict:
    low, high = LENGTHS[kind]
    cap = MAX_TEXT if kind == "string" else MAX_ITEMS
    out = {}
    if low in prop:
        out["min_length"] = prop[low]
    if high in prop:
        out["max_length"] = min(prop[high], cap)  # leakbed's cap holds whatever the model allows
    return out


def _no_structure(prop: dict, known: set[str], beyond: list[bool]) -> None:
    """A keyword the language keeps is in ``known``; a structural one it does not know is refused; any other (a
    pattern, multipleOf, a format...) is the model's own constraint: its check runs in the sandbox."""
    for key in prop:
        if key in known or key in IGNORED:
            continue
        if key in STRUCTURE:
            raise Refused(f"keyword {key!r} is not in leakbed's params language")
        beyond[0] = True


def _resolved(prop: dict, defs: dict) -> dict:
    """``prop`` with its ``$ref`` (or a lone ``allOf: [{$ref}]``) replaced by the model's own ``$defs`` entry;
    a reference anywhere else is refused, never followed."""
    if not isinstance(prop, dict):
        raise Refused("a schema that is not an object")
    for _ in range(MAX_DEPTH + 2):
        if "allOf" in prop and len(prop["allOf"]) == 1 and set(prop["allOf"][0]) == {"$ref"}:
            prop = {**{k: v for k, v in prop.items() if k != "allOf"}, **prop["allOf"][0]}
        ref = prop.get("$ref")
        if ref is None:
            return prop
        if not isinstance(ref, str) or not ref.startswith("#/$defs/") or ref.removeprefix("#/$defs/") not in defs:
            raise Refused("a reference outside the model's own definitions")
        prop = {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in prop.items() if k != "$ref"}}
    raise Refused("references nest too deep")


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else None


def _as(kind: str, default: Any) -> Any:
    """A default as the language holds it: a float field's integer default as a float (lists item by item)."""
    if kind == "float" and type(default) is int:
        return float(default)
    if kind == "int" and type(default) is float and default.is_integer():
        return int(default)
    if isinstance(default, list):
        return [_as(kind, v) for v in default]
    return default


def split_unit(description: str) -> tuple[str, str]:
    """(text, unit) of a description whose bracketed tail is its unit (``"neighbours [count]"``), on one line and
    without control characters."""
    text = " ".join("".join(c for c in description if plain(c) or c in "\t\n\r").split())
    tail = text.removesuffix(".")
    if tail.endswith("]") and "[" in tail:
        cut = tail.rindex("[")
        unit = tail[cut + 1 : -1]
        if unit and "]" not in unit:
            return tail[:cut].rstrip()[:1000], unit[:64]
    return text[:1000], ""


def _aliased(model: type[BaseModel], depth: int) -> str:
    for name, info in model.model_fields.items():
        if info.alias not in (None, name) or info.validation_alias not in (None, name):
            return name
        if depth < MAX_DEPTH + 1:
            for nested in _models(info.annotation):
                found = _aliased(nested, depth + 1)
                if found:
                    return f"{name}.{found}"
    return ""


def _validators(model: type[BaseModel], depth: int) -> bool:
    """Whether ``model`` (or a model nested in it) has validators or serializers of its own."""
    d = model.__pydantic_decorators__
    if d.field_validators or d.model_validators or d.field_serializers or d.model_serializers:
        return True
    nested = [m for f in model.model_fields.values() for m in _models(f.annotation)]
    return depth <= MAX_DEPTH and any(_validators(m, depth + 1) for m in nested)


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f"{loc + ': ' if loc else ''}{first['msg'].removeprefix('Value error, ')}"[:300]
