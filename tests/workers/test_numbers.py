"""The one boundary for plugin numbers (``workers.numbers``): reply headers, budgets, a plugin scorer's result and the
outputs another attack builds on, each checked for type and range, with hypothesis fuzzing the headers and outputs.

Whatever a sandbox sends, the check either returns numbers trusted code can use as they are (finite floats, whole
counts, shares in [0, 1]) or refuses in one line with ``HostileData``: never another exception (a huge integer's
``OverflowError`` killed a lane thread on the old code), never a number out of its range."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leakbed.referee.schemas import RANKING as REFEREE_RANKING
from leakbed.workers.hostile import HostileData
from leakbed.workers.numbers import (
    MAX_EXPORTS,
    MAX_INT,
    RANKING,
    number,
    reply_header,
    scorer_result,
    task_deadline,
    upstream_outputs,
)

HUGE = 10**400


def raw(text: str) -> bytes:
    return text.encode()


# --- numbers and headers --------------------------------------------------------------------------------------------


def test_number_checks_type_and_range() -> None:
    assert number(3, "x", lo=0, hi=5, integer=True) == 3 and number(2.5, "x") == 2.5
    for bad, says in [(True, "bool, not a number"), ("1", "str, not a number"), (None, "NoneType"),
                      (HUGE, "1329 bits, more than 2\\*\\*53"), (MAX_INT + 1, "more than 2\\*\\*53"),
                      (math.nan, "nan, not a finite"), (-math.inf, "-inf, not a finite"), (-1, "outside \\[0, 5\\]"),
                      (2.5, "not a whole number")]:  # fmt: skip
        with pytest.raises(HostileData, match=says):
            number(bad, "x", lo=0, hi=5, integer=isinstance(bad, float) and bad == 2.5)


def test_a_reply_header_is_checked() -> None:
    assert reply_header(raw('{"ok": true, "seconds": 1.5, "pid": 1}'), elapsed=2.0) == {"ok": True, "seconds": 1.5, "pid": 1}
    assert reply_header(raw('{"ok": false, "error": "boom"}'), elapsed=0.1) == {"ok": False, "seconds": 0.0, "error": "boom"}
    refused = {
        '{"ok": true, "seconds": ' + "9" * 400 + "}": "its seconds is an integer of 1329 bits",
        '{"ok": true, "seconds": -1}': "its seconds is -1, outside",
        '{"ok": true, "seconds": NaN}': "JSON holds NaN",
        '{"ok": true, "seconds": 1e999}': "overflows to infinity",
        '{"ok": true, "seconds": 60}': "its seconds is 60, outside \\[0, 3\\]",  # longer than the task took
        '{"ok": true, "seconds": "1"}': "its seconds is str",
        '{"ok": true, "pid": 0}': "its pid is 0, outside",
        '{"ok": true, "pid": 1.5}': "its pid is 1.5, not a whole number",
        '{"ok": 1}': "a reply header without 'ok'",
        '{"ok": true, "ap": 1.0}': "a reply header with key 'ap'",
        '{"ok": false, "error": 5}': "whose error is int, not text",
        "[1]": "a reply header without 'ok'",
    }
    for text, says in refused.items():
        with pytest.raises(HostileData, match=says) as err:
            reply_header(raw(text), elapsed=2.0)
        assert "\n" not in str(err.value)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**300), max_value=10**300) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
HEADER_KEYS = st.sampled_from(["ok", "seconds", "pid", "error", "x"])


@pytest.mark.long
@settings(max_examples=500, deadline=None)
@given(st.dictionaries(HEADER_KEYS, JSONISH, max_size=5), st.floats(min_value=0, max_value=1e6))
def test_fuzzed_reply_headers_are_accepted_in_range_or_refused_in_one_line(doc: dict, elapsed: float) -> None:
    text = json.dumps(doc)  # NaN and Infinity written as JSON doesn't allow them: refused like any other bad header
    try:
        header = reply_header(text.encode(), elapsed=elapsed)
    except HostileData as err:
        assert "\n" not in str(err) and len(str(err)) < 400
        return
    assert set(header) <= {"ok", "seconds", "pid", "error"} and isinstance(header["ok"], bool)
    assert isinstance(header["seconds"], float) and 0.0 <= header["seconds"] <= elapsed + 1.0
    assert "pid" not in header or (isinstance(header["pid"], int) and 1 <= header["pid"] <= 1 << 22)


def test_a_budget_never_passes_the_runs_deadline() -> None:
    assert task_deadline(60, 1800.0) == 60.0
    assert task_deadline(10**9, 1800.0) == 1800.0  # longer than the run allows: the run's deadline
    for bad in (0, -5, math.nan, math.inf, HUGE, "600", None, True):
        assert task_deadline(bad, 1800.0) == 1800.0, bad


# --- a plugin scorer's result ---------------------------------------------------------------------------------------


def test_a_scorer_result_keeps_checked_metrics_and_bounded_texts() -> None:
    got = scorer_result({
        "ap": 0.5, "n_updates": 24.0, "x_chance": 3.0, "custom": -7.25, "flag": True, "missing": None,
        "scored_by": "referee", "scorer_failed": "no", "figures": ["../../x.png"], "bad key!": 1.0,
        "notes": ["\x1b[2Jline\n## Verdict"] * 40, "per_round": {"1": {"ap": 0.4}, "r1": {"ap": 0.3, "x": "\x1b]0;t\x07a"}},
        "tables": {"t\n#": {"header": ["a", "b"], "rows": [["1", "\x1b[31m2"], "not a row"]}, "bad": [1]},
    })  # fmt: skip
    assert got["ap"] == 0.5 and got["n_updates"] == 24 and got["custom"] == -7.25 and got["flag"] is True
    assert "scored_by" not in got and "scorer_failed" not in got and "figures" not in got and "bad key!" not in got
    assert got["notes"] == ["line ## Verdict"] * 16
    assert got["per_round"] == {"r1": {"ap": 0.3, "x": "a"}}  # "1" is not a key name
    assert got["tables"] == {"t #": {"header": ["a", "b"], "rows": [["1", "2"]]}}


@pytest.mark.parametrize(
    ("result", "says"),
    [
        ({"ap": 1.5}, "ap is 1.5, outside \\[0, 1\\]"),
        ({"top1": -0.1}, "top1 is -0.1, outside"),
        ({"coverage": 2}, "coverage is 2, outside"),
        ({"n_updates": -3}, "n_updates is -3, outside"),
        ({"rows_missing": 2.5}, "rows_missing is 2.5, not a whole number"),
        ({"auc": HUGE}, "auc is an integer of 1329 bits"),
        ({"custom": 10**20}, "custom is an integer of 67 bits"),
        ({"x_chance": -1.0}, "x_chance is -1.0, outside"),
        ({"exports": {"knn": {"ap": 7.0}}}, "export 'knn' ap is 7.0, outside"),
        ({"exports": {f"e{i}": {"ap": 0.5} for i in range(MAX_EXPORTS + 1)}}, f"{MAX_EXPORTS + 1} exports, more than"),
        ([1.0], "the result is list, not a dict"),
    ],
)
def test_a_number_out_of_its_range_refuses_the_result(result: object, says: str) -> None:
    with pytest.raises(HostileData, match=says):
        scorer_result(result)


def test_exports_are_text_named_and_checked() -> None:
    got = scorer_result({"exports": {"knn": {"ap": 0.9, "bad key!": 1.0, "name": "x"}, "../x\n\x1b[2J": {"auc": 0.6},
                                     "": {"ap": 0.1}, "metadata": "not metrics"}})  # fmt: skip
    assert got["exports"] == {"knn": {"ap": 0.9}, "../x": {"auc": 0.6}}


# --- outputs another attack builds on -------------------------------------------------------------------------------


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


IDS = np.asarray(["a", "b", "c"])
CLASSES = np.asarray(["u1", "u2"])


def test_the_ranking_an_attack_builds_on_is_the_referees() -> None:
    assert RANKING == REFEREE_RANKING


def test_upstream_outputs_are_checked_as_a_ranking() -> None:
    good = npz(ids=IDS, classes=CLASSES, scores=np.ones((3, 2)), rounds=np.ones(3, int))
    assert set(upstream_outputs(good, max_bytes=1 << 20, ranking=True)) == {"ids", "classes", "scores", "rounds"}
    bad = {
        "no classes": (npz(ids=IDS, scores=np.ones((3, 2))), "array 'classes' is missing"),
        "1-d scores": (npz(ids=IDS, classes=CLASSES, scores=np.ones(3)), "array 'scores' has shape \\(3,\\)"),
        "rows": (npz(ids=IDS, classes=CLASSES, scores=np.ones((4, 2))), "n=4 but"),
        "text scores": (npz(ids=IDS, classes=CLASSES, scores=np.full((3, 2), "x")), "array 'scores' has dtype"),
        "nan": (npz(ids=IDS, classes=CLASSES, scores=np.full((3, 2), np.nan)), "6 values that are not finite"),
        "twice": (npz(ids=IDS, classes=np.asarray(["u1", "u1"]), scores=np.ones((3, 2))), "names a class twice"),
        "pickle": (npz(ids=IDS, classes=CLASSES, scores=np.ones((3, 2)), obj=np.asarray([{}], dtype=object)), "Python objects"),
    }
    for what, (data, says) in bad.items():
        with pytest.raises(HostileData, match=says):
            upstream_outputs(data, max_bytes=1 << 20, ranking=True)
        assert what
    # another family's outputs: bounded, no objects, finite
    with pytest.raises(HostileData, match="not finite"):
        upstream_outputs(npz(x=np.asarray([np.inf])), max_bytes=1 << 20, ranking=False)


ARRAYS = st.dictionaries(
    st.sampled_from(["ids", "classes", "scores", "rounds", "extra"]),
    st.one_of(
        st.lists(st.text(max_size=3), max_size=4).map(lambda v: np.asarray(v, dtype=str)),
        st.lists(st.floats(), max_size=8).map(lambda v: np.asarray(v, dtype=np.float64)),
        st.integers(0, 3).flatmap(lambda n: st.lists(st.floats(), min_size=2 * n, max_size=2 * n))
        .map(lambda v: np.asarray(v, dtype=np.float64).reshape(-1, 2)),
        st.lists(st.integers(-5, 5), max_size=4).map(lambda v: np.asarray(v, dtype=np.int64)),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(ARRAYS)
def test_fuzzed_upstream_outputs_are_a_clean_ranking_or_refused(arrays: dict[str, np.ndarray]) -> None:
    try:
        got = upstream_outputs(npz(**arrays), max_bytes=1 << 20, ranking=True)
    except HostileData as err:
        assert "\n" not in str(err)
        return
    n, k = got["scores"].shape
    assert got["ids"].shape == (n,) and got["classes"].shape == (k,) and np.isfinite(got["scores"]).all()
    assert len(set(got["classes"].tolist())) == k
