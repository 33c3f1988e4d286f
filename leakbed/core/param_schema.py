"""leakbed's own small language for a plugin's parameters, and the checker trusted code runs on them.

A plugin's params model is pydantic code, and pydantic code runs only in a sandbox. What trusted code knows of it is
this: a table of fields, each with a type (``bool``, ``int``, ``float``, ``str``, a ``list`` of one of those, or a
nested ``table`` of fields), its bounds (``ge``/``gt``/``le``/``lt``), its choices (an enum or ``Literal``), its
lengths (``min_length``/``max_length`` of a string or a list), its default, whether it may be left unset
(``optional``) and a description with its unit, and nothing else: no pattern, no reference, no schema of the
plugin's own. Every size is capped (``MAX_*``), so checking a value against a declaration is bounded work done by
the code below: no regular expression, no reference resolution, nothing fetched, no plugin code.

The sandbox makes this declaration from the params model (``attacks.params_language``); trusted code validates it
with the models here (anything else, or anything too large, is refused in one line) and checks each run's table
with ``check_table``. What pydantic checks beyond the language (a string pattern, ``multiple_of``, validators) runs
in the attack's own check, in a sandbox (``workers.checks``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from leakbed.core.errors import LeakbedError

MAX_FIELDS = 256  # fields of one params table, nested tables' included
MAX_DEPTH = 3  # tables within the params table: params.a.b.c at most
MAX_CHOICES = 256  # values of one enum
MAX_TEXT = 4096  # characters of a string value
MAX_ITEMS = 1024  # items of a list value
MAX_BYTES = 64 * 1024  # a whole params table, as JSON (about)
MAX_CHOICE_TEXT = 200  # characters of one enum value
MAX_NAME = 64  # characters of a field's name
INT_RANGE = (-(2**63), 2**63 - 1)  # TOML's integers
Scalar = Literal["bool", "int", "float", "str"]
Kind = Literal["bool", "int", "float", "str", "list", "table"]
NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
NAME_CHARS = NAME_START | frozenset("0123456789")
TYPE_WORDS = {"bool": "a boolean", "int": "an integer", "float": "a number", "str": "a string", "list": "a list",
              "table": "a table"}  # fmt: skip


class ParamsError(LeakbedError, ValueError):
    """Parameters a declaration refuses, or a declaration leakbed refuses: one line, naming the key."""


def valid_name(text: object) -> bool:
    """A field name: a Python identifier of at most ``MAX_NAME`` ASCII characters (checked without a regex)."""
    return (isinstance(text, str) and 0 < len(text) <= MAX_NAME and text[0] in NAME_START
            and all(c in NAME_CHARS for c in text))  # fmt: skip


def plain(text: str) -> bool:
    """No control character (C0, DEL, C1): text that prints as itself on one line."""
    return not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _name(text: str) -> str:
    if not valid_name(text):
        raise ValueError(f"a field name is a Python identifier of at most {MAX_NAME} ASCII characters")
    return text


def _plain(text: str) -> str:
    if not plain(text):
        raise ValueError("control characters are not allowed")
    return text


def _number(value: Any) -> int | float | None:
    if value is None or _finite(value):
        return value
    raise ValueError("a bound is an integer within 64 bits or a finite number")


def _finite(value: Any) -> bool:
    if type(value) is int:
        return INT_RANGE[0] <= value <= INT_RANGE[1]
    return type(value) is float and math.isfinite(value)


def _scalar(value: Any) -> Any:
    if type(value) is bool or _finite(value):
        return value
    if type(value) is str and len(value) <= MAX_CHOICE_TEXT and plain(value):
        return value
    raise ValueError(f"a choice is a boolean, a number or a string of at most {MAX_CHOICE_TEXT} plain characters")


def _value(value: Any) -> Any:
    """A default as data: a scalar, None, or a list of scalars (checked against its field by ``ParamField``)."""
    if value is None or type(value) in (bool, str) or _finite(value):
        return value
    if type(value) is list and len(value) <= MAX_ITEMS and all(type(v) in (bool, str) or _finite(v) for v in value):
        return value
    raise ValueError("a default is a boolean, a number, a string, a list of them or null")


Name = Annotated[str, AfterValidator(_name)]
Bound = Annotated[Any, AfterValidator(_number)]
Choice = Annotated[Any, AfterValidator(_scalar)]
Default = Annotated[Any, AfterValidator(_value)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParamField(_Frozen):
    """One parameter. For a ``list``, ``items`` is its items' type and the bounds and choices hold for each item;
    ``min_length``/``max_length`` count a string's characters or a list's items."""

    name: Name = Field(description="its key in `[attack.params.<name>]`: a Python identifier")
    type: Kind = Field(description="bool, int, float, str, list or table")
    items: Scalar | None = Field(None, description="a list's item type: bool, int, float or str")
    optional: bool = Field(False, description="may be left unset (None); such a field defaults to None")
    default: Default = Field(None, description="its value when the config sets none (a table's fields hold theirs)")
    ge: Bound = Field(None, description="value ≥ this (a number; a list's items)")
    gt: Bound = Field(None, description="value > this")
    le: Bound = Field(None, description="value ≤ this")
    lt: Bound = Field(None, description="value < this")
    min_length: int | None = Field(None, ge=0, le=max(MAX_TEXT, MAX_ITEMS), description="fewest characters or items")
    max_length: int | None = Field(None, ge=0, le=max(MAX_TEXT, MAX_ITEMS), description="most characters or items")
    choices: tuple[Choice, ...] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES, description="the values it may take (a list's items: each)"
    )
    description: Annotated[str, AfterValidator(_plain)] = Field("", max_length=1000, description="what it is, one line")
    unit: Annotated[str, AfterValidator(_plain)] = Field("", max_length=64, description="its unit (the description's [tail])")
    fields: tuple[ParamField, ...] = Field((), max_length=MAX_FIELDS, description="a table's own fields")

    @property
    def scalar(self) -> str:
        """The type each value (a list's: each item) has."""
        return self.items if self.type == "list" and self.items is not None else self.type

    @model_validator(mode="after")
    def _consistent(self) -> ParamField:
        kind, scalar = self.type, self.scalar
        if (kind == "list") != (self.items is not None):
            raise ValueError("a list names its items' type (items); no other type does")
        if kind == "table":
            if self.optional or self.default is not None or self.choices or self.min_length is not None or \
                    self.max_length is not None or any(b is not None for b in (self.ge, self.gt, self.le, self.lt)):
                raise ValueError("a table has fields only (no default, bound, choice or length of its own)")
            _unique(self.fields)
            return self
        if self.fields:
            raise ValueError("only a table has fields")
        bounds = [b for b in (self.ge, self.gt, self.le, self.lt) if b is not None]
        if bounds and scalar not in ("int", "float"):
            raise ValueError("bounds (ge, gt, le, lt) are for numbers")
        if self.ge is not None and self.gt is not None or self.le is not None and self.lt is not None:
            raise ValueError("at most one lower bound (ge or gt) and one upper bound (le or lt)")
        low, high = _first(self.ge, self.gt), _first(self.le, self.lt)
        strict = self.gt is not None or self.lt is not None
        if low is not None and high is not None and (low > high or (low == high and strict)):
            raise ValueError("its bounds leave no value")
        if (self.min_length is not None or self.max_length is not None) and kind not in ("str", "list"):
            raise ValueError("lengths (min_length, max_length) are for strings and lists")
        cap = MAX_TEXT if kind == "str" else MAX_ITEMS
        if self.max_length is not None and self.max_length > cap:
            raise ValueError(f"max_length above leakbed's cap of {cap}")
        if self.min_length is not None and self.max_length is not None and self.min_length > self.max_length:
            raise ValueError("min_length above max_length")
        if self.choices is not None:
            if not all(_of_type(c, scalar) for c in self.choices):
                raise ValueError(f"every choice is {TYPE_WORDS[scalar]}")
            if len(set(self.choices)) != len(self.choices):
                raise ValueError("choices repeat")
        if self.optional and self.default is not None:
            raise ValueError("an optional field defaults to None (TOML has no null: unset means None)")
        if not self.optional and self.default is None:
            raise ValueError("a default is required (or optional = true)")
        if self.default is not None:
            try:
                _check_field(self, self.default, "default", _Meter())
            except ParamsError as err:
                raise ValueError(f"its own default is refused: {str(err).removeprefix('default: ')}") from None
        return self


def _of_type(value: Any, kind: str) -> bool:
    return type(value) is {"bool": bool, "int": int, "float": float, "str": str}[kind]


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _unique(fields: tuple[ParamField, ...]) -> None:
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError("field names repeat")


class ParamSchema(_Frozen):
    """An attack's parameters as trusted code knows them: its fields, in declaration order."""

    fields: tuple[ParamField, ...] = Field((), max_length=MAX_FIELDS)

    @model_validator(mode="after")
    def _bounded(self) -> ParamSchema:
        _unique(self.fields)
        count, stack = 0, [(f, 1) for f in self.fields]
        while stack:
            field, depth = stack.pop()
            count += 1
            if count > MAX_FIELDS:
                raise ValueError(f"more than {MAX_FIELDS} fields, nested tables' included")
            if field.type == "table":
                if depth > MAX_DEPTH:
                    raise ValueError(f"tables nest deeper than {MAX_DEPTH} levels ({field.name})")
                stack += [(f, depth + 1) for f in field.fields]
        return self

    def field(self, name: str) -> ParamField | None:
        return next((f for f in self.fields if f.name == name), None)

    def defaults(self) -> dict[str, Any]:
        """Every field's default (a nested table's as a table); an optional field is left out (unset)."""
        return _defaults(self.fields)


def _defaults(fields: tuple[ParamField, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if f.type == "table":
            out[f.name] = _defaults(f.fields)
        elif f.default is not None:
            out[f.name] = list(f.default) if isinstance(f.default, list) else f.default
    return out


# --- the checker ------------------------------------------------------------------------------------------------


class _Meter:
    """The work a check does, counted: every value visited and every character scanned adds to ``steps``; the
    table's size as JSON adds to ``size``, which ``MAX_BYTES`` caps (so ``steps`` is bounded too)."""

    def __init__(self) -> None:
        self.steps = 0
        self.size = 0

    def charge(self, size: int, where: str) -> None:
        self.steps += 1 + size
        self.size += 2 + size
        if self.size > MAX_BYTES:
            raise ParamsError(f"{where}: the parameters exceed {MAX_BYTES // 1024} KiB")


def check_table(
    schema: ParamSchema, table: Mapping[str, Any] | None, where: str, owner: str, meter: _Meter | None = None
) -> dict[str, Any]:
    """``table`` completed with the declared defaults and checked against ``schema``; ParamsError (one line) names the
    key (``where``: e.g. ``attack.params.knn``), and for an unknown one the closest and the valid names (``owner``:
    the plugin's name). An integral float for an int becomes an int, an int for a float a float; an unset optional
    field is left out."""
    return _check_fields(schema.fields, table, where, owner, meter or _Meter())


def _check_fields(
    fields: tuple[ParamField, ...], table: Any, where: str, owner: str, meter: _Meter
) -> dict[str, Any]:
    given = {} if table is None else table
    if not isinstance(given, Mapping):
        raise ParamsError(f"{where}: expected a table, got {_kind_of(given)}")
    by_name = {f.name: f for f in fields}
    for key in given:
        meter.charge(len(key) if isinstance(key, str) else 0, where)
        if key not in by_name:
            raise ParamsError(_unknown(key, by_name, where, owner))
    out: dict[str, Any] = {}
    for f in fields:
        value = given[f.name] if f.name in given else _defaults((f,)).get(f.name)
        checked = _check_field(f, value, f"{where}.{f.name}", meter, owner)
        if checked is not None:
            out[f.name] = checked
    return out


def _unknown(key: Any, by_name: dict[str, ParamField], where: str, owner: str) -> str:
    readable = isinstance(key, str) and 0 < len(key) <= MAX_NAME and plain(key) and " " not in key
    known = sorted(by_name)
    close = difflib.get_close_matches(key, known, n=1) if readable else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    name = key if readable else _shown(key)
    return f"{where}.{name}: unknown parameter of {owner!r}{hint} (valid: {', '.join(known) or 'none'})"


def _check_field(f: ParamField, value: Any, where: str, meter: _Meter, owner: str = "") -> Any:
    meter.charge(0, where)
    if f.type == "table":
        return _check_fields(f.fields, value, where, owner, meter)
    if value is None:
        if f.optional:
            return None
        raise ParamsError(f"{where}: expected {TYPE_WORDS[f.type]}, got nothing")
    if f.type != "list":
        return _check_scalar(f, f.type, value, where, meter)
    if not isinstance(value, list | tuple):
        raise ParamsError(f"{where}: expected a list of {_plural(f.scalar)}, got {_kind_of(value)}")
    _check_length(f, len(value), "items", where)
    return [_check_scalar(f, f.scalar, item, f"{where}.{i}", meter) for i, item in enumerate(value)]


def _check_length(f: ParamField, length: int, what: str, where: str) -> None:
    cap = MAX_TEXT if what == "characters" else MAX_ITEMS
    high = cap if f.max_length is None else min(f.max_length, cap)
    if length > high:
        raise ParamsError(f"{where}: {length} {what}, more than the maximum of {high}")
    if f.min_length is not None and length < f.min_length:
        raise ParamsError(f"{where}: {length} {what}, fewer than the minimum of {f.min_length}")


def _check_scalar(f: ParamField, kind: str, value: Any, where: str, meter: _Meter) -> Any:
    if kind == "bool":
        if type(value) is not bool:
            raise ParamsError(f"{where}: expected a boolean, got {_kind_of(value)}")
        meter.charge(5, where)
    elif kind == "str":
        if type(value) is not str:
            raise ParamsError(f"{where}: expected a string, got {_kind_of(value)}")
        _check_length(f, len(value), "characters", where)
        meter.charge(len(value), where)
        if not plain(value):
            raise ParamsError(f"{where}: a string with control characters")
    else:
        value = _number_of(kind, value, where)
        meter.charge(24, where)
        _check_bounds(f, value, where)
    if f.choices is not None and value not in f.choices:
        listed = ", ".join(_shown(c) for c in f.choices[:8]) + (", …" if len(f.choices) > 8 else "")
        raise ParamsError(f"{where}: {_shown(value)} is not one of {listed}")
    return value


def _number_of(kind: str, value: Any, where: str) -> int | float:
    """``value`` as an ``int`` (an integral float becomes one) or a finite ``float``; booleans are not numbers."""
    if type(value) is int and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise ParamsError(f"{where}: an integer beyond 64 bits")
    if type(value) is float and not math.isfinite(value):
        raise ParamsError(f"{where}: {value} is not a finite number")
    if kind == "int":
        if type(value) is float and value.is_integer() and INT_RANGE[0] <= value <= INT_RANGE[1]:
            return int(value)
        if type(value) is not int:
            raise ParamsError(f"{where}: expected an integer, got {_kind_of(value)}")
        return value
    if type(value) not in (int, float):
        raise ParamsError(f"{where}: expected a number, got {_kind_of(value)}")
    return float(value)


def _check_bounds(f: ParamField, value: int | float, where: str) -> None:
    shown = _shown(value)
    if f.ge is not None and value < f.ge:
        raise ParamsError(f"{where}: {shown} is less than the minimum of {_shown(f.ge)}")
    if f.gt is not None and value <= f.gt:
        raise ParamsError(f"{where}: {shown} is less than or equal to the minimum of {_shown(f.gt)}")
    if f.le is not None and value > f.le:
        raise ParamsError(f"{where}: {shown} is greater than the maximum of {_shown(f.le)}")
    if f.lt is not None and value >= f.lt:
        raise ParamsError(f"{where}: {shown} is greater than or equal to the maximum of {_shown(f.lt)}")


def _plural(kind: str) -> str:
    return {"bool": "booleans", "int": "integers", "float": "numbers", "str": "strings"}[kind]


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return "nothing" if value is None else "another type"


def _shown(value: Any) -> str:
    """A value in an error line: bounded, on one line, without control characters (``repr`` escapes them)."""
    if isinstance(value, bool | float) or (type(value) is int and INT_RANGE[0] <= value <= INT_RANGE[1]):
        return repr(value)
    if isinstance(value, str):
        text = repr(value[:60])
        return text if len(value) <= 60 else f"{text[:-1]}…{text[-1]}"
    return _kind_of(value)
