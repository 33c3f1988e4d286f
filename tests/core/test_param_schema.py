"""leakbed's params language (``core.param_schema``): a declaration is data of a fixed, small shape, refused in one line
where it says anything else or too much; checking a table against it is leakbed's own bounded work. Property-based
fuzzing (hypothesis) of declarations and of values: the checker never hangs, raises nothing but ``ParamsError``, and
its work is bounded by the sizes it was given (counted, never timed)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.param_schema import (
    MAX_BYTES,
    MAX_CHOICES,
    MAX_DEPTH,
    MAX_FIELDS,
    MAX_ITEMS,
    MAX_TEXT,
    ParamField,
    ParamSchema,
    ParamsError,
    _Meter,
    check_table,
)

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def f(name: str, kind: str, **kw: Any) -> dict:
    return {"name": name, "type": kind, **kw}


SCHEMA = ParamSchema.model_validate({"fields": [
    f("k", "int", default=10, ge=1, le=1000, description="neighbours", unit="count"),
    f("lr", "float", default=0.5, gt=0.0, lt=1.0),
    f("on", "bool", default=True),
    f("mode", "str", default="a", choices=["a", "b"]),
    f("name", "str", default="x", min_length=1, max_length=8),
    f("cols", "list", items="int", default=[], max_length=4, ge=0, le=9),
    f("maybe", "int", optional=True, ge=0),
    f("net", "table", fields=[f("epochs", "int", default=30, ge=1), f("inner", "table", fields=[f("x", "float", default=1.0)])]),
]})  # fmt: skip


def check(table: Any) -> dict:
    return check_table(SCHEMA, table, "attack.params.fake", "fake")


def test_a_table_is_completed_with_defaults_and_normalised():
    assert check(None) == {"k": 10, "lr": 0.5, "on": True, "mode": "a", "name": "x", "cols": [], "net": {"epochs": 30,
                                                                                                          "inner": {"x": 1.0}}}
    out = check({"k": 3.0, "lr": 0.25, "cols": (1, 2), "maybe": 4, "net": {"inner": {"x": 2}}})
    assert out["k"] == 3 and type(out["k"]) is int and out["cols"] == [1, 2] and out["maybe"] == 4
    assert out["net"] == {"epochs": 30, "inner": {"x": 2.0}} and type(out["net"]["inner"]["x"]) is float
    assert check(out) == out  # checking a checked table changes nothing


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"k": 0}, "k: 0 is less than the minimum of 1"),
        ({"k": 1001}, "k: 1001 is greater than the maximum of 1000"),
        ({"lr": 1.0}, "lr: 1.0 is greater than or equal to the maximum of 1.0"),
        ({"lr": 0}, "lr: 0.0 is less than or equal to the minimum of 0.0"),
        ({"k": 2.5}, "k: expected an integer, got a number"),
        ({"k": True}, "k: expected an integer, got a boolean"),
        ({"k": 2**64}, "k: an integer beyond 64 bits"),
        ({"lr": math.nan}, "lr: nan is not a finite number"),
        ({"lr": math.inf}, "lr: inf is not a finite number"),
        ({"on": 1}, "on: expected a boolean, got an integer"),
        ({"mode": "c"}, "mode: 'c' is not one of 'a', 'b'"),
        ({"name": ""}, "name: 0 characters, fewer than the minimum of 1"),
        ({"name": "x" * 9}, "name: 9 characters, more than the maximum of 8"),
        ({"name": "a\x1b[2Jb"}, "name: a string with control characters"),
        ({"cols": [1, 10]}, "cols.1: 10 is greater than the maximum of 9"),
        ({"cols": [0] * 5}, "cols: 5 items, more than the maximum of 4"),
        ({"cols": "0"}, "cols: expected a list of integers, got a string"),
        ({"net": 3}, "net: expected a table, got an integer"),
        ({"net": {"epochs": 0}}, "net.epochs: 0 is less than the minimum of 1"),
        ({"net": {"epoch": 3}}, "net.epoch: unknown parameter of 'fake'; did you mean 'epochs'? (valid: epochs, inner)"),
        ({"kk": 1}, "kk: unknown parameter of 'fake'; did you mean 'k'? (valid: cols, k, lr, maybe, mode, name, net, on)"),
        ({"\x1b]0;x\x07": 1}, "'\\x1b]0;x\\x07': unknown parameter of 'fake' (valid: cols, k, lr, maybe, mode, name, net, on)"),
        ({"k": None}, "k: expected an integer, got nothing"),
        ({"k": [1]}, "k: expected an integer, got a list"),
        ({"x" * 70_000: 1}, f": the parameters exceed {MAX_BYTES // 1024} KiB"),
    ],
)
def test_a_value_the_declaration_refuses_is_one_line_naming_the_key(table, says):
    with pytest.raises(ParamsError) as err:
        check(table)
    assert str(err.value) == f"attack.params.fake{'.' if not says.startswith(':') else ''}{says}"
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value) and len(str(err.value)) < 300


def test_sizes_beyond_leakbeds_caps_are_refused_before_any_scan():
    """A 10 MB string or a million-item list is refused by its length alone; a table of many strings, each within
    its cap, by the total size: the meter stops it at ``MAX_BYTES``."""
    wide = ParamSchema(fields=tuple(ParamField(name=f"s{i}", type="str", default="") for i in range(40)))
    for table, says in [
        ({"name": "x" * 10_000_000}, "10000000 characters, more than the maximum of 8"),
        ({"cols": [0] * 1_000_000}, "1000000 items, more than the maximum of 4"),
    ]:
        meter = _Meter()
        with pytest.raises(ParamsError, match=says):
            check_table(SCHEMA, table, "p", "fake", meter)
        assert meter.steps < 100  # nothing was scanned
    meter = _Meter()
    with pytest.raises(ParamsError, match=f"^p.s1[0-9]: the parameters exceed {MAX_BYTES // 1024} KiB$"):
        check_table(wide, {f"s{i}": "y" * MAX_TEXT for i in range(40)}, "p", "fake", meter)
    assert MAX_BYTES < meter.size <= MAX_BYTES + MAX_TEXT + 2 and meter.steps <= meter.size


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"fields": [f("k", "int", default=1, **{"$ref": "http://127.0.0.1:9/x"})]}, r"fields.0.\$ref\b.*Extra inputs"),
        ({"$ref": "file:///etc/passwd"}, r"^\$ref\b.*Extra inputs"),
        ({"fields": [f("w", "str", default="a", pattern="^(a+)+$")]}, r"fields.0.pattern\b.*Extra inputs"),
        ({"fields": [f("w", "str", default="a", ge=1)]}, "bounds \\(ge, gt, le, lt\\) are for numbers"),
        ({"fields": [f("k", "int", default=1, ge=2, le=1)]}, "its bounds leave no value"),
        ({"fields": [f("k", "int", default=0, ge=1)]}, "its own default is refused: 0 is less than the minimum of 1"),
        ({"fields": [f("k", "int")]}, "a default is required"),
        ({"fields": [f("k", "int", optional=True, default=3)]}, "an optional field defaults to None"),
        ({"fields": [f("k", "int", default=1, choices=[1, "a"])]}, "every choice is an integer"),
        ({"fields": [f("k", "int", default=1, choices=list(range(MAX_CHOICES + 1)))]}, "at most 256 items"),
        ({"fields": [f("s", "str", default="", max_length=MAX_TEXT + 1)]}, "max_length: Input should be less than or equal to"),
        ({"fields": [f("l", "list", items="int", default=[], max_length=MAX_ITEMS + 1)]}, "max_length above leakbed's cap"),
        ({"fields": [f("k", "int", default=1, ge=math.nan)]}, "a bound is an integer within 64 bits or a finite number"),
        ({"fields": [f("k", "int", default=1, le=2**64)]}, "a bound is an integer within 64 bits"),
        ({"fields": [f("bad-name", "int", default=1)]}, "a field name is a Python identifier"),
        ({"fields": [f("k\x1b[2J", "int", default=1)]}, "a field name is a Python identifier"),
        ({"fields": [f("k", "int", default=1, description="x\x1b]0;pwned\x07")]}, "control characters are not allowed"),
        ({"fields": [f("k", "int", default=1), f("k", "int", default=2)]}, "field names repeat"),
        ({"fields": [f("k", "regex", default=1)]}, "fields.0.type"),
        ({"fields": [f("t", "table", default=1, fields=[])]}, "a table has fields only"),
        ({"fields": [f(f"k{i}", "int", default=1) for i in range(MAX_FIELDS + 1)]}, "at most 256 items"),
    ],
    ids=["ref-url", "ref-file", "pattern", "str-bounds", "empty-bounds", "default-out", "no-default", "optional-default",
         "mixed-choices", "many-choices", "long-text", "long-list", "nan-bound", "huge-bound", "name", "name-escape",
         "description-escape", "repeated", "unknown-type", "table-default", "too-many"],
)
def test_a_declaration_outside_the_language_is_refused(doc, says):
    with pytest.raises(ValidationError) as err:
        Declaration.model_validate({"name": "fake", "scoring": {"kind": "reid"}, "params": doc})
    first = err.value.errors()[0]
    line = ".".join(str(p) for p in first["loc"][1:]) + ": " + first["msg"]
    assert re.search(says, line), line


def _nested(depth: int) -> dict:
    field = f("x", "int", default=1)
    for i in range(depth):
        field = f(f"t{i}", "table", fields=[field])
    return {"fields": [field]}


def test_tables_nest_at_most_three_deep_and_hold_at_most_256_fields_in_all():
    ParamSchema.model_validate(_nested(MAX_DEPTH))
    with pytest.raises(ValidationError, match="tables nest deeper than 3 levels"):
        ParamSchema.model_validate(_nested(MAX_DEPTH + 1))
    wide = [f(f"t{i}", "table", fields=[f(f"x{j}", "int", default=1) for j in range(100)]) for i in range(3)]
    with pytest.raises(ValidationError, match="more than 256 fields, nested tables' included"):
        ParamSchema.model_validate({"fields": wide})


def test_a_declared_budget_names_a_numeric_field():
    params = {"fields": [f("seconds", "float", default=60.0, gt=0), f("name", "str", default="x")]}
    base = {"name": "fake", "scoring": {"kind": "reid"}, "params": params}
    assert Declaration.model_validate({**base, "budget": "seconds"}).budget == "seconds"
    for budget in ("name", "missing"):
        with pytest.raises(ValidationError, match=f"budget names '{budget}', which is not a numeric field of its params"):
            Declaration.model_validate({**base, "budget": budget})


# --- fuzzing ----------------------------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))  # fmt: skip
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner,
                                                                                                max_size=6), max_leaves=40)
KEYS = ["name", "type", "items", "optional", "default", "ge", "gt", "le", "lt", "min_length", "max_length", "choices",
        "description", "unit", "fields", "$ref", "pattern"]  # fmt: skip
KINDS = ["bool", "int", "float", "str", "list", "table", "regex"]


@st.composite
def raw_fields(draw: st.DrawFn, depth: int = 0) -> dict:
    """A field declaration as a hostile sandbox might write it: right keys with wrong values, wrong keys, tables."""
    doc: dict[str, Any] = {"name": draw(st.sampled_from(["k", "x", "k", "lr", "bad-name", "", "a" * 70])),
                           "type": draw(st.sampled_from(KINDS))}  # fmt: skip
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=6, unique=True)):
        if key == "fields":
            doc[key] = draw(st.lists(raw_fields(depth + 1), max_size=3)) if depth < 4 else []
        elif key == "items":
            doc[key] = draw(st.sampled_from(KINDS))
        elif key == "choices":
            doc[key] = draw(st.lists(scalars, max_size=5))
        else:
            doc[key] = draw(json_values)
    return doc


@pytest.mark.long
@FUZZ
@given(st.lists(raw_fields(), max_size=5))
def test_fuzzed_declarations_are_accepted_or_refused_by_validation_only(fields):
    """Whatever a sandbox writes as a params declaration, leakbed's models accept it or refuse it with a
    ValidationError (one line, through ``workers.introspect``): never another exception."""
    try:
        schema = ParamSchema.model_validate({"fields": fields})
    except ValidationError:
        return
    # an accepted declaration's defaults pass its own fields: a config that sets nothing is never refused
    assert check_table(schema, None, "p", "fuzz") == check_table(schema, schema.defaults(), "p", "fuzz")


# valid declarations, to fuzz values against
numbers = st.one_of(st.integers(min_value=-1000, max_value=1000), st.floats(min_value=-1e3, max_value=1e3))


@st.composite
def valid_fields(draw: st.DrawFn, name: str, depth: int = 1) -> ParamField:
    kind = draw(st.sampled_from(["bool", "int", "float", "str", "list", "table"] if depth < MAX_DEPTH else
                                ["bool", "int", "float", "str", "list"]))  # fmt: skip
    if kind == "table":
        names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=0, max_size=3, unique=True))
        return ParamField(name=name, type="table", fields=tuple(draw(valid_fields(n, depth + 1)) for n in names))
    scalar = draw(st.sampled_from(["bool", "int", "float", "str"])) if kind == "list" else kind
    spec: dict[str, Any] = {}
    if scalar in ("int", "float") and draw(st.booleans()):
        spec["ge"] = -10
        spec["le"] = 10
    if kind in ("str", "list") and draw(st.booleans()):
        spec["max_length"] = draw(st.integers(min_value=1, max_value=8))
    if scalar in ("int", "str") and draw(st.booleans()):
        spec["choices"] = (1, 2, 3) if scalar == "int" else ("a", "b")
    one = {"bool": False, "int": 1, "float": 1.0, "str": "a"}[scalar]
    default = [] if kind == "list" else one
    optional = draw(st.booleans()) and kind != "list"
    return ParamField(name=name, type=kind, items=scalar if kind == "list" else None, optional=optional,
                      default=None if optional else default, **spec)  # fmt: skip


@st.composite
def schemas(draw: st.DrawFn) -> ParamSchema:
    names = draw(st.lists(st.sampled_from(["k", "lr", "on", "mode", "net", "cols"]), max_size=5, unique=True))
    return ParamSchema(fields=tuple(draw(valid_fields(n)) for n in names))


@st.composite
def tables(draw: st.DrawFn, schema: ParamSchema) -> dict:
    """Tables near the declaration: its keys (and typos) with values of every JSON shape, big ones included."""
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from([*(x.name for x in schema.fields), "kk", "a", "b"]), max_size=6, unique=True)):
        out[key] = draw(st.one_of(json_values, numbers, st.just("x" * 5000), st.just([1] * 2000),
                                  st.dictionaries(st.sampled_from(["a", "b", "c", "d", "zz"]), json_values, max_size=4)))
    return out


@pytest.mark.long
@FUZZ
@given(st.data())
def test_fuzzed_values_are_checked_by_bounded_work_and_refused_by_params_error_only(data):
    """Against any valid declaration, any table: a checked table (idempotent, within ``MAX_BYTES`` as JSON) or a
    ParamsError of one line, after work the meter bounds by the size it saw (never a hang, never another error)."""
    schema = data.draw(schemas())
    table = data.draw(tables(schema))
    meter = _Meter()
    try:
        out = check_table(schema, table, "attack.params.fuzz", "fuzz", meter)
    except ParamsError as err:
        assert "\n" not in str(err) and len(str(err)) < 500
    else:
        assert check_table(schema, out, "attack.params.fuzz", "fuzz") == out
        assert len(json.dumps(out)) <= MAX_BYTES
    assert meter.steps <= meter.size <= MAX_BYTES + MAX_TEXT + 2


def test_a_checked_table_fits_what_its_declaration_declared():
    """The default declaration of a built-in-like attack: every field of the result is declared, of its type."""
    decl = Declaration(name="fake", scoring=Scoring(kind="reid"), params=SCHEMA)
    out = check_table(decl.params, {"k": 5}, "p", "fake")
    assert set(out) <= {x.name for x in SCHEMA.fields} and decl.params_defaults == check(None)
