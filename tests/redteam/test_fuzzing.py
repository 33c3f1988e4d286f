"""The red team's fuzzing of what a lane sends back, below the process level: the frames on its reply pipe, the
``.npz`` outputs in a frame's body and the JSON of its replies, each as hypothesis makes it from nothing and as it
mutates a well-formed one.

A hostile lane writes any bytes it likes on its reply pipe. Trusted code reads them the way the lane's reader does
(``workers.frames.read_frame``, then ``workers.numbers.reply_header``), and the pool parses a body with
``workers.hostile.load_npz``: each step either hands on what it checked (lengths within their bounds, a header whose
numbers are in range, arrays of plain dtypes within the byte bound) or refuses with its one error type in one line;
never another exception (which would end a trusted thread instead of one task) and never a wait past the deadline.
Declarations, plugin text, reply headers and upstream outputs are fuzzed where their checks live: see
``docs/explanation/threat-model.md`` (fuzzing)."""

from __future__ import annotations

import io
import json
import os
import time
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakbed.workers.frames import MAX_HEADER, PREFIX, FrameError, encode, read_frame
from leakbed.workers.hostile import HostileData, load_json, load_npz
from leakbed.workers.numbers import reply_header

pytestmark = pytest.mark.redteam

MAX_BODY = 4096
MAX_NPZ = 1 << 16
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _one_line(err: BaseException) -> None:
    assert "\n" not in str(err) and 0 < len(str(err)) < 400, repr(err)


def _through_the_pipe(data: bytes) -> tuple[bytes, bytes] | FrameError:
    """What the lane reader makes of ``data`` written on its reply pipe by a lane that then ends."""
    r, w = os.pipe()
    try:
        os.write(w, data)  # at most 64 KiB: the pipe's buffer holds it all
        os.close(w)
        w = -1
        started = time.monotonic()
        try:
            got = read_frame(r, max_body=MAX_BODY, deadline=started + 2.0)
        except FrameError as err:
            got = err
        assert time.monotonic() - started < 1.5  # a closed pipe ends the read at once, never at the deadline
        return got
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def _reader(data: bytes) -> None:
    """The lane reader's two steps over ``data``: a frame within its bounds, then a header in range; or one line."""
    got = _through_the_pipe(data)
    if isinstance(got, FrameError):
        _one_line(got)
        return
    head, body = got
    assert len(head) <= MAX_HEADER and len(body) <= MAX_BODY
    try:
        header = reply_header(head, elapsed=1.0)
    except HostileData as err:
        _one_line(err)
        return
    assert isinstance(header["ok"], bool) and 0.0 <= header["seconds"] <= 2.0


FINITE = st.floats(allow_nan=False, allow_infinity=False)  # what json.dumps writes as JSON (the lane's own encoder)
HEADERS = st.dictionaries(st.sampled_from(["ok", "seconds", "pid", "error", "x"]),
                          st.none() | st.booleans() | st.integers(-(10**30), 10**30) | FINITE | st.text(max_size=20),
                          max_size=5)  # fmt: skip


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzzed_bytes_on_the_reply_pipe_are_a_checked_frame_or_one_line(data: bytes) -> None:
    _reader(data)


@FUZZ
@given(st.binary(max_size=64), st.integers(0, MAX_HEADER + 8), st.integers(0, 2 * MAX_BODY), st.binary(max_size=600))
def test_fuzzed_frame_prefixes_never_read_past_their_bounds(head: bytes, head_len: int, body_len: int, rest: bytes) -> None:
    """Lengths that lie (longer than what follows, over the bounds) against a header of any bytes."""
    _reader(PREFIX.pack(b"LBF1", head_len, body_len) + head + rest)


@FUZZ
@given(HEADERS, st.binary(max_size=256), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
       st.integers(0, 10**6))  # fmt: skip
def test_mutated_frames_are_a_checked_frame_or_one_line(header: dict, body: bytes, flips: list[tuple[int, int]],
                                                       cut: int) -> None:  # fmt: skip
    data = bytearray(encode(header, body))
    for at, byte in flips:
        data[at % len(data)] = byte
    _reader(bytes(data[: max(1, cut % (len(data) + 1))]))


def _valid_npz(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    names = np.array(["a", "bb"][: n % 2 + 1])
    np.savez_compressed(buf, scores=rng.random((n, 3)), ids=np.arange(n, dtype=np.int64), names=names)
    return buf.getvalue()


def _parsed(data: bytes) -> None:
    """``load_npz`` over ``data``: plain arrays within the byte bound, or ``HostileData`` in one line."""
    try:
        arrays = load_npz(data, max_bytes=MAX_NPZ, max_members=8)
    except HostileData as err:
        _one_line(err)
        return
    assert len(arrays) <= 8 and sum(a.nbytes for a in arrays.values()) <= MAX_NPZ
    for key, array in arrays.items():
        assert isinstance(array, np.ndarray) and not array.dtype.hasobject and array.dtype.fields is None, key


@FUZZ
@given(st.integers(0, 40), st.integers(0, 9), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       st.integers(0, 10**6))  # fmt: skip
def test_mutated_npz_outputs_are_plain_bounded_arrays_or_one_line(n: int, seed: int, flips: list[tuple[int, int]],
                                                                 cut: int) -> None:  # fmt: skip
    data = bytearray(_valid_npz(n, seed))
    for at, byte in flips:
        data[at % len(data)] = byte
    _parsed(bytes(data[: cut % (len(data) + 1)] if cut % 3 == 0 else data))


MEMBER_NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=12)


@FUZZ
@given(st.dictionaries(MEMBER_NAMES, st.binary(max_size=200), max_size=6))
def test_zips_of_fuzzed_members_are_plain_bounded_arrays_or_one_line(members: dict[str, bytes]) -> None:
    """Archives whose members hold any bytes (a ``.npy`` magic and header or not), under any names."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, payload in members.items():
            zf.writestr(name, b"\x93NUMPY" + payload if len(payload) % 2 else payload)
    _parsed(buf.getvalue())


def test_the_fuzzed_readers_accept_what_they_should() -> None:
    """The properties above are not vacuous: a well-formed frame and archive pass both steps whole."""
    head, body = _through_the_pipe(encode({"ok": True, "seconds": 0.5}, b"xyz"))  # type: ignore[misc]
    assert reply_header(head, elapsed=1.0)["seconds"] == 0.5 and body == b"xyz"
    arrays = load_npz(_valid_npz(5, 0), max_bytes=MAX_NPZ)
    assert arrays["scores"].shape == (5, 3) and arrays["ids"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(HostileData, match="nests deeper"):
        load_json(b"[" * 40 + b"]" * 40, max_depth=16)


LEAVES = st.none() | st.booleans() | st.integers(-(10**40), 10**40) | FINITE
JSON = st.recursive(LEAVES | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=40)  # fmt: skip


@FUZZ
@given(st.one_of(st.binary(max_size=512), JSON.map(lambda v: json.dumps(v).encode())), st.integers(1, 8))
def test_fuzzed_json_replies_are_bounded_values_or_one_line(data: bytes, depth: int) -> None:
    try:
        value = load_json(data, max_bytes=4096, max_depth=depth, max_items=64)
    except HostileData as err:
        _one_line(err)
        return
    stack, count = [(value, 0)], 0
    while stack:
        item, level = stack.pop()
        count += 1
        if isinstance(item, dict | list):
            assert level < depth
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
        assert not (isinstance(item, float) and (item != item or item in (float("inf"), float("-inf"))))
    assert count <= 64
