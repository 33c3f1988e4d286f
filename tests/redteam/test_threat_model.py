"""The threat model's red-team tables held to the tests (``docs/explanation/threat-model.md``, "The red team").

Each class's table has a row per route with an "as root" and an "as an ordinary user" column and names the test that
holds it as ``file::test``. A table that names a test that does not exist, leaves a red-team test out, or says a
route holds while its test is a strict xfail tells a reader something the suite does not show: each fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.redteam
REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "explanation" / "threat-model.md"
HERE = Path(__file__).resolve().parent
NAMED = re.compile(r"`((?:tests/[\w/]+/)?test_\w+\.py)?::(test_\w+)(?:\[[^\]`]*\])?`")
HEADER = "| route | what the hostile plugin tries | as root | as an ordinary user | test |"


def _section() -> str:
    text = PAGE.read_text()
    return text[text.index("\n## The red team\n"):]


def _names(text: str) -> list[tuple[str, str]]:
    """Every ``file::test`` in ``text``: a bare ``::test`` is in the file named last before it, a bare file name is in
    ``tests/redteam``."""
    found, last = [], ""
    for file, test in NAMED.findall(text):
        if file:
            last = file if "/" in file else f"tests/redteam/{file}"
        assert last, f"::{test} names no file"
        found.append((last, test))
    return found


def _tests(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def _strict_xfail(fn: ast.FunctionDef) -> bool:
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("mark.xfail"):
            return any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True for k in deco.keywords)
    return False


def test_every_test_a_row_names_exists():
    missing = [f"{file}::{test}" for file, test in _names(_section()) if test not in _tests(REPO / file)]
    assert not missing, missing


def test_every_red_team_test_is_named_in_a_row():
    named = {(file, test) for file, test in _names(_section())}
    left = [f"{p.name}::{t}" for p in sorted(HERE.glob("test_*.py")) if p.name != Path(__file__).name
            for t in _tests(p) if (f"tests/redteam/{p.name}", t) not in named]  # fmt: skip
    assert not left, left


def test_every_strict_xfail_is_a_row_that_does_not_hold_and_no_other_row_says_so():
    rows = [line for line in _section().splitlines() if line.startswith("| ") and "::" in line]
    xfails = {(f"tests/redteam/{p.name}", t) for p in HERE.glob("test_*.py") for t, fn in _tests(p).items() if _strict_xfail(fn)}
    assert xfails, "the mount table route is a strict xfail: the scan found none"
    for row in rows:
        named = set(_names(row))
        if named & xfails:
            assert "**does not hold**" in row, row
        elif "does not hold" in row:
            pytest.fail(f"a row says a route does not hold, but names no strict xfail: {row}")


def test_each_class_has_its_table_with_both_users():
    section = _section()
    classes = re.split(r"\n### ", section)[1:]
    numbered = [c for c in classes if re.match(r"\d+\. ", c)]
    assert [int(c.split(".")[0]) for c in numbered] == list(range(1, 11))
    for body in numbered:
        assert HEADER in body, body.splitlines()[0]
        header, rows = "", 0
        for line in body.splitlines():
            if not line.startswith("|"):
                header = ""
            elif not header:
                header = line
            elif header == HEADER and not line.startswith("|---"):
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                assert len(cells) == 5 and cells[2] and cells[3] and _names(cells[4]), line
                rows += 1
        assert rows, body.splitlines()[0]
