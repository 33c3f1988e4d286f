"""A params model in leakbed's params language (``attacks.params_language``, run inside the sandbox): what the language
can say is translated; a type it has no word for is refused in one line naming the field; a constraint it has no
word for (a pattern, ``multiple_of``...) and validators stay the model's, marked ``validates`` so the attack's own
check runs them in a sandbox."""

from __future__ import annotations

import enum
import time
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field, StringConstraints, conint, field_validator

from leakbed.attacks.params_language import declared, split_unit
from leakbed.core.entry_points import PluginError
from leakbed.core.param_schema import MAX_CHOICES, MAX_TEXT, ParamField, check_table
from leakbed.core.params import Params


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(Params):
    lr: float = Field(1e-3, gt=0.0, le=1.0, description="learning rate [1]")


class Every(Params):
    flag: bool = Field(False, description="a switch [flag]")
    k: int = Field(10, ge=1, le=1000, description="neighbours [count]")
    rate: float = Field(1, gt=0, lt=1e3, description="a rate\n  over   lines [1/s]")
    name: str = Field("x", min_length=1, max_length=8, description="a name [text]")
    mode: Literal["a", "b"] = Field("a", description="how [name]")
    colour: Colour = Field(Colour.RED, description="which [name]")
    cols: list[Annotated[int, Field(ge=0)]] = Field([1, 2], max_length=4, description="columns [indices]")
    tags: tuple[str, ...] = Field((), description="tags [names]")
    maybe: int | None = Field(None, ge=0, description="an optional count [count]")
    inner: Inner = Field(Inner(), description="a table [table]")
    narrow: conint(ge=2, le=3) = Field(2, description="two or three [count]")


def schema_of(model: type[Params]) -> tuple[Any, bool]:
    return declared(model, "fake", model.model_validate({}).model_dump(mode="json"))


def test_every_construct_of_the_language_is_translated():
    schema, beyond = schema_of(Every)
    assert not beyond
    f = {x.name: x for x in schema.fields}
    assert f["flag"] == ParamField(name="flag", type="bool", default=False, description="a switch", unit="flag")
    assert f["k"] == ParamField(name="k", type="int", default=10, ge=1, le=1000, description="neighbours", unit="count")
    assert f["rate"].default == 1.0 and type(f["rate"].default) is float and (f["rate"].gt, f["rate"].lt) == (0, 1e3)
    assert f["rate"].description == "a rate over lines" and f["rate"].unit == "1/s"
    assert (f["name"].type, f["name"].min_length, f["name"].max_length) == ("str", 1, 8)
    assert f["mode"].choices == ("a", "b") and f["colour"].choices == ("red", "blue") and f["colour"].default == "red"
    cols = f["cols"]
    assert (cols.type, cols.items, cols.ge, cols.max_length, cols.default) == ("list", "int", 0, 4, [1, 2])
    assert (f["tags"].type, f["tags"].items, f["tags"].default) == ("list", "str", [])
    assert f["maybe"].optional and f["maybe"].default is None and f["maybe"].ge == 0
    assert f["inner"].type == "table" and f["inner"].fields == (
        ParamField(name="lr", type="float", default=1e-3, gt=0.0, le=1.0, description="learning rate", unit="1"),
    )
    assert (f["narrow"].ge, f["narrow"].le) == (2, 3)
    assert schema.defaults() == {"flag": False, "k": 10, "rate": 1.0, "name": "x", "mode": "a", "colour": "red",
                                 "cols": [1, 2], "tags": [], "inner": {"lr": 1e-3}, "narrow": 2}  # fmt: skip
    # the model's own defaults pass the trusted checker unchanged
    assert check_table(schema, None, "attack.params.fake", "fake") == schema.defaults()


class Patterned(Params):
    word: str = Field("a", pattern=r"^(a+)+$", max_length=64, description="a word [text]")


class Multiple(Params):
    step: int = Field(2, multiple_of=2, description="even [count]")


class Unique(Params):
    ids: set[int] = Field(set(), description="ids [indices]")


class Validated(Params):
    k: int = Field(1, description="odd [count]")

    @field_validator("k")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError("odd only")
        return v


class NestedValidated(Params):
    inner: Validated = Field(Validated(), description="a table [table]")


class ItemLength(Params):
    words: list[Annotated[str, StringConstraints(max_length=3)]] = Field([], description="words [text]")


@pytest.mark.parametrize("model", [Patterned, Multiple, Unique, Validated, NestedValidated, ItemLength])
def test_what_the_language_cannot_say_stays_the_models_and_marks_it_validates(model):
    """A pattern never reaches trusted code: the field is a string of bounded length there, and the model's own
    check (in a sandbox) holds the pattern."""
    schema, beyond = schema_of(model)
    assert beyond
    assert "pattern" not in schema.model_dump_json() and "multiple" not in schema.model_dump_json()
    if model is Patterned:
        assert schema.fields[0] == ParamField(name="word", type="str", default="a", max_length=64, description="a word",
                                              unit="text")


class Union_(Params):
    x: int | str = Field(1, description="x [1]")


class Mapping_(Params):
    x: dict[str, int] = Field({}, description="x [1]")


class Pair(Params):
    x: tuple[int, int] = Field((1, 2), description="x [1]")


class Anything(Params):
    x: Any = Field(1, description="x [1]")


class OptionalTable(Params):
    x: Inner | None = Field(None, description="x [table]")


class OptionalWithDefault(Params):
    x: int | None = Field(3, description="x [count]")


class Aliased(Params):
    x: int = Field(1, alias="why", description="x [count]")


class Lists(Params):
    x: list[list[int]] = Field([], description="x [1]")


class Mixed(Params):
    x: Literal[1, "a"] = Field(1, description="x [1]")


class Many(Params):
    x: Literal[tuple(f"v{i}" for i in range(10_000))] = Field("v0", description="x [name]")  # type: ignore[valid-type]


class OutOfBounds(Params):
    x: int = Field(0, ge=1, description="x [count]")


class D4(Params):
    v: int = Field(1, description="v [1]")


class D3(Params):
    d: D4 = Field(D4(), description="d [table]")


class D2(Params):
    d: D3 = Field(D3(), description="d [table]")


class D1(Params):
    d: D2 = Field(D2(), description="d [table]")


class Deep(Params):
    d: D1 = Field(D1(), description="d [table]")


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (Union_, r"params field 'x': a union other than 'X \| None' is not in leakbed's params language$"),
        (Mapping_, r"params field 'x': type 'object' is not in leakbed's params language"),
        (Pair, r"params field 'x': a list names one item type"),
        (Anything, r"params field 'x': type 'any' is not in leakbed's params language"),
        (OptionalTable, r"params field 'x': an optional table is not in leakbed's params language"),
        (OptionalWithDefault, r"params field 'x': an optional field defaults to None"),
        (Aliased, r"params field 'x': an alias is not in leakbed's params language$"),
        (Lists, r"params field 'x': a list of lists is not in leakbed's params language$"),
        (Mixed, r"params field 'x': choices of one type only"),
        (Many, rf"params field 'x': 10000 choices; leakbed's params language holds at most {MAX_CHOICES}$"),
        (OutOfBounds, r"params field 'x': its own default is refused: 0 is less than the minimum of 1$"),
        (Deep, r"params field 'd.d.d.d': tables nest deeper than 3 levels$"),
    ],
    ids=["union", "dict", "fixed-tuple", "any", "optional-table", "optional-default", "alias", "list-of-lists", "mixed",
         "many-choices", "default-out-of-bounds", "deep"],
)
def test_a_type_the_language_has_no_word_for_is_refused_in_one_line_naming_the_field(model, says):
    t0 = time.monotonic()
    with pytest.raises(PluginError, match="^attack 'fake': " + says) as err:
        schema_of(model)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    print(f"{model.__name__}: refused in {time.monotonic() - t0:.3f} s")


def test_a_string_longer_than_leakbeds_cap_is_capped_there():
    class Long(Params):
        text: str = Field("", max_length=10**6, description="text [text]")

    schema, _ = schema_of(Long)
    assert schema.fields[0].max_length == MAX_TEXT


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("neighbours [count]", ("neighbours", "count")),
        ("a rate [1/s].", ("a rate", "1/s")),
        ("no unit", ("no unit", "")),
        ("x [a [b]]", ("x [a [b]]", "")),
        ("tab\tand\x1b[31m escape [count]", ("tab and[31m escape", "count")),
    ],
)
def test_a_description_splits_into_text_and_unit_on_one_plain_line(text, parts):
    assert split_unit(text) == parts
