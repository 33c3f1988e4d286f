"""workers.hostile: the readers trusted code uses on whatever an attack's sandbox produced.

Each test plays the hostile side (zip bombs, pickles, lying headers, links, floods, escape sequences) and
checks the refusal happens before the damage: memory peaks stay small, no link is followed, no hang.
"""

from __future__ import annotations

import errno
import io
import os
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy_format

from leakbed.workers import hostile
from leakbed.workers.hostile import (
    ArraySpec,
    HostileData,
    LogSink,
    load_json,
    load_npz,
    open_beneath,
    read_beneath,
    tail,
)

MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------------------------------------------------
# crafting archives the way an attacker would


def npy_header(shape: tuple[int, ...], descr: Any = "<f8", fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buf.getvalue()


def raw_zip(entries: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A zip from (name, method, compressed bytes, crc, declared uncompressed size): the sizes are whatever we say."""
    out = io.BytesIO()
    central = []
    for name, method, body, crc, size in entries:
        offset = out.tell()
        encoded = name.encode()
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(body), size, len(encoded), 0))
        out.write(encoded + body)
        fields = (20, 20, 0, method, 0, 0x21, crc, len(body), size, len(encoded), 0, 0, 0, 0, 0, offset)
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", *fields) + encoded)
    start = out.tell()
    out.write(b"".join(central))
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), out.tell() - start, start, 0))
    return out.getvalue()


def deflated_zeros(header: bytes, zero_mib: int) -> tuple[bytes, int]:
    """Raw deflate of ``header`` + ``zero_mib`` MiB of zeros, built in milliseconds (each flushed MiB compresses
    to the same ~1 KB), and the CRC of that content."""
    zeros = bytes(MiB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(header)
    for _ in range(zero_mib):
        crc = zlib.crc32(zeros, crc)
    return head + block * zero_mib + c.flush(), crc


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def npz_member(name: str, body: bytes, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        zf.writestr(name, body)
    return buf.getvalue()


def peak_of(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Peak traced memory (bytes) while ``fn`` runs, and its result or the exception it raised."""
    tracemalloc.start()
    try:
        try:
            result: Any = fn()
        except Exception as err:  # noqa: BLE001 - the caller inspects it
            result = err
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def gib_bomb() -> bytes:
    """One ~1 MB deflated member of zeros whose .npy header and zip entry both, truthfully, claim 1 GiB."""
    header = npy_header((GiB // 8,))
    body, crc = deflated_zeros(header, 1024)
    assert len(body) < 2 * MiB
    return raw_zip([("scores.npy", zipfile.ZIP_DEFLATED, body, crc, len(header) + GiB)])


# --------------------------------------------------------------------------------------------------------------------
# load_npz


def test_the_crafting_helpers_make_archives_numpy_reads() -> None:
    header = npy_header((MiB // 8 * 3,))
    body, crc = deflated_zeros(header, 3)
    data = raw_zip([("x.npy", zipfile.ZIP_DEFLATED, body, crc, len(header) + 3 * MiB)])
    assert np.load(io.BytesIO(data))["x"].shape == (MiB // 8 * 3,)
    assert load_npz(data, max_bytes=4 * MiB)["x"].sum() == 0


def test_a_zip_bomb_is_refused_before_anything_is_inflated(gib_bomb: bytes) -> None:
    peak, err = peak_of(lambda: load_npz(gib_bomb, max_bytes=16 * MiB))
    assert isinstance(err, HostileData)
    claimed = len(npy_header((GiB // 8,))) + GiB
    assert str(err) == f"member 'scores.npy' claims {claimed} bytes uncompressed, more than the {16 * MiB} allowed"
    assert peak < 8 * MiB


def test_a_bomb_that_lies_about_its_size_inflates_no_further_than_the_lie() -> None:
    """The entry declares 100 doubles; its deflate stream holds 1 GiB. Only the declared bytes are inflated."""
    header = npy_header((100,))
    body, _ = deflated_zeros(header, 1024)
    small = len(header) + 800
    truth_crc = zlib.crc32(header + bytes(800))
    for crc, refused in ((0xDEADBEEF, True), (truth_crc, False)):
        data = raw_zip([("scores.npy", zipfile.ZIP_DEFLATED, body, crc, small)])
        peak, result = peak_of(lambda data=data: load_npz(data, max_bytes=16 * MiB))
        assert peak < 8 * MiB
        if refused:
            assert isinstance(result, HostileData) and "CRC" in str(result)
        else:  # what the entry declares is a valid array: the rest of the stream is never read
            assert result["scores"].shape == (100,)


def test_a_header_claiming_more_than_the_member_holds_is_refused_before_allocating() -> None:
    header = npy_header((GiB // 8,))
    data = npz_member("scores.npy", header + bytes(800))
    peak, err = peak_of(lambda: load_npz(data, max_bytes=2 * GiB))
    assert isinstance(err, HostileData) and "but the member holds" in str(err)
    assert peak < 8 * MiB


@pytest.mark.parametrize("shape", [(1000,), (5,), (10, 2)])
def test_a_header_shape_that_disagrees_with_the_size_is_refused(shape: tuple[int, ...]) -> None:
    data = npz_member("scores.npy", npy_header(shape) + bytes(80))  # 80 bytes: 10 doubles
    with pytest.raises(HostileData, match=r"header says shape .* but the member holds"):
        load_npz(data, max_bytes=MiB)


def test_a_header_over_max_bytes_is_refused() -> None:
    data = npz_member("x.npy", npy_header((MiB,)) + bytes(8 * MiB))
    with pytest.raises(HostileData):
        load_npz(data, max_bytes=4 * MiB)


@pytest.mark.parametrize("shape", [(-1, -8), (True,), (1,) * 65])
def test_shapes_numpy_would_not_make_are_refused(shape: tuple[int, ...]) -> None:
    data = npz_member("x.npy", npy_header(shape) + bytes(8))
    with pytest.raises(HostileData, match="invalid shape"):
        load_npz(data, max_bytes=MiB)


def test_pickled_object_arrays_are_refused() -> None:
    buf = io.BytesIO()
    np.savez(buf, evil=np.array([{"a": 1}, print], dtype=object))
    with pytest.raises(HostileData, match="holds Python objects"):
        load_npz(buf.getvalue(), max_bytes=MiB)
    fields = np.zeros(2, dtype=[("a", "<f8"), ("b", "O")])
    buf = io.BytesIO()
    np.savez(buf, evil=fields)
    with pytest.raises(HostileData, match="holds Python objects"):
        load_npz(buf.getvalue(), max_bytes=MiB)


def test_structured_and_subarray_dtypes_are_refused() -> None:
    with pytest.raises(HostileData, match="structured"):
        load_npz(npz(s=np.zeros(3, dtype=[("a", "<f8"), ("b", "<i4")])), max_bytes=MiB)
    data = npz_member("s.npy", npy_header((3,), descr=("<f8", (2,))) + bytes(48))  # a subarray dtype, 16 bytes each
    with pytest.raises(HostileData, match="structured"):
        load_npz(data, max_bytes=MiB)


def test_good_arrays_round_trip_writable() -> None:
    arrays = {
        "f": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4),
        "i": np.arange(-5, 5, dtype=np.int64),
        "u": np.array([3, 250], dtype=np.uint8),
        "s": np.array(["alice", "bob", "ünïcödé"]),
        "b": np.array([[True, False], [False, True]]),
        "fortran": np.asfortranarray(np.arange(24.0).reshape(2, 3, 4)),
        "big_endian": np.arange(4, dtype=">i4"),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 7)),
        "nan": np.array([np.nan, np.inf, -1.0]),  # non-finite values are data: scorers handle them
        "nested/name-1.v2": np.ones(2),
    }
    for data in (npz(**arrays), _savez_stored(arrays)):
        got = load_npz(data, max_bytes=MiB)
        assert got.keys() == arrays.keys()
        for key, want in arrays.items():
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            np.testing.assert_array_equal(got[key], want)
            assert got[key].flags.writeable
        assert got["fortran"].flags.f_contiguous
        got["f"][0, 0] = 7.0


def _savez_stored(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize(
    "name, reason",
    [
        ("../escape.npy", "unsafe name"),
        ("/abs.npy", "unsafe name"),
        ("notes.txt", "not a .npy file"),
        (".npy", "unsafe name"),
        ("sp ace.npy", "unsafe name"),
        ("x" * 129 + ".npy", "unsafe name"),
        ("new\nline.npy", "unsafe name"),
    ],
)
def test_bad_member_names_are_refused(name: str, reason: str) -> None:
    body = npy_header((1,)) + bytes(8)
    with pytest.raises(HostileData, match=reason) as caught:
        load_npz(raw_zip([(name, zipfile.ZIP_STORED, body, zlib.crc32(body), len(body))]), max_bytes=MiB)
    assert "\n" not in str(caught.value)


def test_duplicates_too_many_members_and_oversized_archives_are_refused() -> None:
    body = npy_header((1,)) + bytes(8)
    entry = ("a.npy", zipfile.ZIP_STORED, body, zlib.crc32(body), len(body))
    with pytest.raises(HostileData, match="appears twice"):
        load_npz(raw_zip([entry, entry]), max_bytes=MiB)
    many = raw_zip([(f"a{i}.npy", *entry[1:]) for i in range(5)])
    with pytest.raises(HostileData, match="5 members, more than the 4 allowed"):
        load_npz(many, max_bytes=MiB, max_members=4)
    assert len(load_npz(many, max_bytes=MiB, max_members=5)) == 5
    with pytest.raises(HostileData, match="more than the 100 allowed"):
        load_npz(many, max_bytes=100)
    # each member within bounds, the sum not
    parts = [(f"a{i}.npy", zipfile.ZIP_STORED, b"", 0, 600) for i in range(3)]
    with pytest.raises(HostileData, match="in all"):
        load_npz(raw_zip(parts), max_bytes=1000)


@pytest.mark.parametrize("data", [b"", b"not a zip at all", b"PK\x03\x04" + bytes(100), npz(a=np.ones(3))[:-30]])
def test_what_is_not_a_zip_is_refused(data: bytes) -> None:
    with pytest.raises(HostileData, match="not a valid .npz"):
        load_npz(data, max_bytes=MiB)


def test_a_truncated_or_garbled_header_is_refused() -> None:
    for body in (b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 50, b"\x93NUMPX\x01\x00", b"\x93NUMPY\x03\x00" + bytes(8), b"\x93NUMPY"):
        with pytest.raises(HostileData):
            load_npz(npz_member("a.npy", body), max_bytes=MiB)


SCHEMA = {
    "scores": ArraySpec("f", ("n", "k")),
    "ids": ArraySpec("iu", ("n",)),
    "names": ArraySpec("U", (None,), optional=True),
}


def test_a_schema_is_met() -> None:
    got = load_npz(npz(scores=np.zeros((4, 3)), ids=np.arange(4)), max_bytes=MiB, schema=SCHEMA, extra=False)
    assert got["scores"].shape == (4, 3) and "names" not in got


@pytest.mark.parametrize(
    "arrays, extra, reason",
    [
        ({"scores": np.zeros((4, 3))}, True, "'ids' is missing"),
        ({"scores": np.zeros((4, 3), dtype=np.int32), "ids": np.arange(4)}, True, "kind 'i'"),
        ({"scores": np.zeros((4, 3)), "ids": np.arange(4.0)}, True, "kind 'f'"),
        ({"scores": np.zeros((4, 3)), "ids": np.arange(5)}, True, "has n=5 but 'scores' axis 0 has n=4"),
        ({"scores": np.zeros(12), "ids": np.arange(4)}, True, "expected 2 dims"),
        ({"scores": np.zeros((4, 3)), "ids": np.arange(4), "names": np.zeros(2)}, True, "kind 'f'"),
        ({"scores": np.zeros((4, 3)), "ids": np.arange(4), "truth": np.zeros(4)}, False, "'truth' is not expected"),
    ],
)
def test_schema_violations_are_refused(arrays: dict[str, np.ndarray], extra: bool, reason: str) -> None:
    with pytest.raises(HostileData, match=reason):
        load_npz(npz(**arrays), max_bytes=MiB, schema=SCHEMA, extra=extra)


def test_exact_dims_and_extra_allowed() -> None:
    schema = {"w": ArraySpec("f", (2, None))}
    assert load_npz(npz(w=np.zeros((2, 9)), other=np.ones(1)), max_bytes=MiB, schema=schema)["other"][0] == 1
    with pytest.raises(HostileData, match="expected"):
        load_npz(npz(w=np.zeros((3, 9))), max_bytes=MiB, schema=schema)


def test_the_schema_is_checked_before_payloads_are_read() -> None:
    data = npz(ids=np.arange(4), scores=np.zeros((MiB // 8, 4)))  # 4 MiB of scores, the wrong kind of ids below
    peak, err = peak_of(lambda: load_npz(data, max_bytes=8 * MiB, schema={"ids": ArraySpec("f"), "scores": ArraySpec("f")}))
    assert isinstance(err, HostileData) and peak < MiB


# --------------------------------------------------------------------------------------------------------------------
# load_json


def test_json_within_bounds_parses() -> None:
    assert load_json(b'{"auc": 0.5, "rows": [1, 2, null, true, "x"], "nested": {"a": [[1]]}}') == {
        "auc": 0.5,
        "rows": [1, 2, None, True, "x"],
        "nested": {"a": [[1]]},
    }
    assert load_json(b"[" * 16 + b"]" * 16, max_depth=16) is not None


@pytest.mark.parametrize(
    "data, kwargs, reason",
    [
        (b"[" * 17 + b"]" * 17, {}, "deeper than the 16"),
        (b"[" * 200_000 + b"]" * 200_000, {"max_bytes": 1 << 20}, "deeper than the 16"),
        (b'{"a": {"b": {"c": 1}}}', {"max_depth": 2}, "deeper than the 2"),
        (b"[" + b"0," * 100 + b"0]", {"max_items": 100}, "more than the 100 values"),
        (b" " * 101, {"max_bytes": 100}, "more than the 100 allowed"),
        (b'{"auc": NaN}', {}, "NaN"),
        (b"[Infinity]", {}, "Infinity"),
        (b"-Infinity", {}, "-Infinity"),
        (b"[1e999]", {}, "infinity"),
        (b'{"a": 1', {}, "not valid JSON"),
        (b'"\xff\xfe"', {}, "not UTF-8"),
        (b"1" * 5000, {}, "not valid JSON"),
        (b'"' + b"x" * (MiB + 1) + b'"', {"max_bytes": 4 * MiB}, "string of"),
        (b'{"' + b"k" * (MiB + 1) + b'": 1}', {"max_bytes": 4 * MiB}, "key of"),
    ],
)
def test_json_out_of_bounds_is_refused(data: bytes, kwargs: dict[str, int], reason: str) -> None:
    with pytest.raises(HostileData, match=reason) as caught:
        load_json(data, **kwargs)
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------------------------------------------------------
# tail


def test_tail_reads_only_the_end_of_a_big_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stderr.log"
    with open(path, "wb") as f:
        f.truncate(50 * MiB)
        f.seek(50 * MiB - 10)
        f.write(b"Traceback!")
    asked: list[int] = []
    real_pread = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        asked.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(hostile.os, "pread", counting)
    got = tail(path, 4096)
    assert got == bytes(4086) + b"Traceback!" and sum(asked) <= 4096 + 1
    assert tail(path, 10) == b"Traceback!"
    small = tmp_path / "small.log"
    small.write_bytes(b"short")
    assert tail(small) == b"short"


def test_tail_refuses_symlinks_and_non_files(tmp_path: Path) -> None:
    secret = tmp_path / "truth.csv"
    secret.write_bytes(b"user,partition")
    (tmp_path / "log").symlink_to(secret)
    with pytest.raises(HostileData, match="symlink"):
        tail(tmp_path / "log")
    os.mkfifo(tmp_path / "fifo")  # must not block waiting for a writer
    with pytest.raises(HostileData, match="not a regular file"):
        tail(tmp_path / "fifo")
    with pytest.raises(HostileData, match="not a regular file"):
        tail(tmp_path)


# --------------------------------------------------------------------------------------------------------------------
# open_beneath, read_beneath


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every beneath-test runs twice: with openat2, and with the component walk used where openat2 is missing."""
    if request.param == "walk":

        def no_openat2(*_: object) -> int:
            raise OSError(errno.ENOSYS, "Function not implemented")

        monkeypatch.setattr(hostile, "_openat2", no_openat2)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An output folder as a hostile sandbox could leave it, and the truth it must not lead to."""
    outside = tmp_path / "truth"
    outside.mkdir()
    (outside / "labels.csv").write_bytes(b"secret")
    out = tmp_path / "out"
    (out / "sub" / "deeper").mkdir(parents=True)
    (out / "preds.json").write_bytes(b'{"ok": 1}')
    (out / "sub" / "deeper" / "scores.npz").write_bytes(b"nested")
    (out / "to_truth").symlink_to(outside / "labels.csv")
    (out / "rel_link").symlink_to("preds.json")
    (out / "dir_link").symlink_to(outside)
    (out / "sub" / "up").symlink_to("..")
    os.link(outside / "labels.csv", out / "hard")
    (out / "big").write_bytes(b"x" * 1001)
    os.mkfifo(out / "fifo")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd, out
    finally:
        os.close(fd)


def test_openat2_is_used_where_the_kernel_has_it(tree: tuple[int, Path]) -> None:
    fd, _ = tree
    try:
        opened = hostile._openat2(fd, b"preds.json", os.O_RDONLY | os.O_CLOEXEC, 0x08 | 0x04)
    except OSError as err:
        if err.errno == errno.ENOSYS:
            pytest.skip("no openat2 on this kernel")
        raise
    os.close(opened)
    with pytest.raises(OSError) as caught:
        hostile._openat2(fd, b"dir_link/labels.csv", os.O_RDONLY | os.O_CLOEXEC, 0x08 | 0x04)
    assert caught.value.errno == errno.ELOOP


def test_plain_files_read_fine(resolver: str, tree: tuple[int, Path]) -> None:
    fd, _ = tree
    assert read_beneath(fd, "preds.json", 100) == b'{"ok": 1}'
    assert read_beneath(fd, "sub/deeper/scores.npz", 6) == b"nested"
    assert read_beneath(fd, "big", 1001) == b"x" * 1001
    opened = open_beneath(fd, "sub/deeper/scores.npz")
    try:
        assert os.read(opened, 100) == b"nested"
    finally:
        os.close(opened)


@pytest.mark.parametrize(
    "relpath, reason",
    [
        ("to_truth", "link"),
        ("rel_link", "link"),
        ("dir_link/labels.csv", "link"),
        ("sub/up/preds.json", "link"),
        ("../truth/labels.csv", r"'\.\.'"),
        ("sub/../../truth/labels.csv", r"'\.\.'"),
        ("/etc/passwd", "absolute"),
        (str(Path(__file__).resolve()), "absolute"),
        ("", "empty"),
        ("sub//deeper/scores.npz", "empty"),
        ("sub/deeper/", "empty"),
        ("hard", "has 2 hard links"),
        ("big", "1001 bytes, more than the 1000 allowed"),
        ("fifo", "not a regular file"),
        ("sub", "not a regular file"),
    ],
)
def test_hostile_paths_are_refused(resolver: str, tree: tuple[int, Path], relpath: str, reason: str) -> None:
    fd, _ = tree
    with pytest.raises(HostileData, match=reason) as caught:
        read_beneath(fd, relpath, 1000)
    assert "\n" not in str(caught.value)


def test_magic_links_are_refused(resolver: str) -> None:
    fd = os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(HostileData, match="link"):
            open_beneath(fd, "exe")
        with pytest.raises(HostileData, match="link"):
            open_beneath(fd, "root/etc/passwd")
    finally:
        os.close(fd)


def test_a_missing_file_is_an_ordinary_error(resolver: str, tree: tuple[int, Path]) -> None:
    fd, _ = tree
    with pytest.raises(FileNotFoundError):
        read_beneath(fd, "sub/nothing.json", 10)


def test_no_descriptor_leaks(resolver: str, tree: tuple[int, Path]) -> None:
    fd, _ = tree
    before = len(os.listdir("/proc/self/fd"))
    for relpath in ("preds.json", "to_truth", "dir_link/labels.csv", "hard", "big", "fifo", "sub/deeper/scores.npz"):
        try:
            read_beneath(fd, relpath, 1000)
        except HostileData:
            pass
    assert len(os.listdir("/proc/self/fd")) == before


# --------------------------------------------------------------------------------------------------------------------
# LogSink

FLOOD = """
import sys
block = bytes(range(256)) * 4096
out = sys.stdout.buffer
for _ in range({mib}):
    out.write(block)
out.write(b"END\\n")
out.flush()
"""


def test_a_flood_is_capped_on_disk_and_in_memory(tmp_path: Path) -> None:
    cap, mib = MiB, 200
    r, w = os.pipe()
    tracemalloc.start()
    try:
        child = subprocess.Popen([sys.executable, "-c", FLOOD.format(mib=mib)], stdout=w)
        os.close(w)
        sink = LogSink(r, tmp_path / "attack.log", cap=cap)
        assert child.wait(timeout=120) == 0
        sink.close(timeout=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    total = mib * MiB + 4
    notice = LogSink.NOTICE.format(cap=cap).encode() + b"\n"
    log = (tmp_path / "attack.log").read_bytes()
    block = bytes(range(256)) * 4096
    assert log == block[:cap] + b"\n" + notice
    assert len(log) <= cap + len(notice) + 1
    assert sink.written == cap and sink.dropped == total - cap
    assert sink.tail() == block[-(8192 - 4) :] + b"END\n"
    assert peak < 8 * MiB


def test_the_cap_notice_comes_once_and_only_when_something_is_dropped(tmp_path: Path) -> None:
    notice = b"[leakbed: log cap of %d bytes reached; the rest is counted, not written]\n"
    for payload, cap, want in (
        (b"hello world, and more\n", 11, b"hello world\n" + notice % 11),
        (b"line\n", 5, b"line\n"),
        (b"line\n" * 3, 5, b"line\n" + notice % 5),
    ):
        r, w = os.pipe()
        path = tmp_path / f"{cap}-{len(payload)}.log"
        sink = LogSink(r, path, cap=cap, tail_bytes=4)
        for i in range(0, len(payload), 3):
            os.write(w, payload[i : i + 3])
        os.close(w)
        sink.close()
        assert path.read_bytes() == want
        assert sink.written == min(cap, len(payload)) and sink.dropped == len(payload) - sink.written
        assert sink.tail() == payload[-4:]


def test_close_stops_draining_when_the_writer_never_ends(tmp_path: Path) -> None:
    r, w = os.pipe()
    sink = LogSink(r, tmp_path / "hang.log", cap=100)
    try:
        os.write(w, b"still running")
        start = time.monotonic()
        sink.close(timeout=0.3)
        assert time.monotonic() - start < 2.0
        assert sink.tail() == b"still running"
        with pytest.raises(BrokenPipeError):  # the sink's read end is closed
            os.write(w, b"more")
    finally:
        os.close(w)
    sink.close()  # idempotent


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_does_not_stop_the_draining() -> None:
    r, w = os.pipe()
    sink = LogSink(r, Path("/dev/full"), cap=MiB)  # every write fails with ENOSPC
    try:
        for _ in range(64):  # 4 MiB through a 64 KiB pipe: blocks unless the sink keeps reading
            os.write(w, bytes(64 * 1024))
    finally:
        os.close(w)
    sink.close()
    assert sink.written == 0 and sink.dropped == 4 * MiB and len(sink.tail()) == 8192


def test_the_log_path_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (tmp_path / "attack.log").symlink_to(target)
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as caught:
            LogSink(r, tmp_path / "attack.log", cap=100)
        assert caught.value.errno == errno.ELOOP and not target.exists()
    finally:
        os.close(r)
        os.close(w)
