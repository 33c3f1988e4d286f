"""How trusted leakbed code reads anything that untrusted attack code produced.

Threat model: attack code runs in a bubblewrap sandbox and is hostile. Whatever it leaves behind (arrays,
JSON, log and error texts, files in its output folder, its stdout/stderr) may be crafted to exhaust memory
or disk (zip bombs, floods, huge texts), to run code on load (pickled object arrays), to make trusted code
read or clobber files outside the sandbox's folder (symlinks, hard links, FIFOs that block), or to spoof
leakbed's own report lines (escape sequences, newlines). Every reader here bounds what it allocates
*before* allocating it, never follows a link, and refuses with a one-line ``HostileData``. Its texts cross
``core.plugin_text`` (the one boundary for plugin text), its numbers ``workers.numbers``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import math
import os
import re
import select
import stat
import threading
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from leakbed.core.plugin_text import clean, quoted_name

__all__ = [
    "ArraySpec",
    "HostileData",
    "LogSink",
    "load_json",
    "load_npz",
    "open_beneath",
    "read_beneath",
    "tail",
]


class HostileData(ValueError):
    """Untrusted output refused; the message is one line, safe to log (attacker text in it crossed
    ``core.plugin_text``)."""


def _one_line(err: BaseException) -> str:
    """An exception's text (which may echo attacker bytes) for a HostileData message."""
    return clean(f"{type(err).__name__}: {err}", 200)


# --------------------------------------------------------------------------------------------------------------------
# arrays


@dataclass(frozen=True)
class ArraySpec:
    """What one array of an ``.npz`` must look like; checked on the header, before the payload is read.

    ``kinds``: allowed numpy dtype kinds ("f" float, "iu" integers, "b" bool, "U" str, "fiub" numbers).
    ``shape``: None for any ndim; else one entry per dim: an int (exact size), a str (a symbolic dim, the
    same size in every array of one load, e.g. "n" rows) or None (any size).
    """

    kinds: str = "biufU"
    shape: tuple[int | str | None, ...] | None = None
    optional: bool = False


_SAFE_NAME = re.compile(r"[A-Za-z0-9_./-]{1,128}")
_NPY_HEADER_BUDGET = 8 + 4 + 10_000  # magic + longest length field + numpy's own max_header_size
_READ_CHUNK = 1 << 20
_MAX_NDIM = 64  # numpy's own limit


class _Bounded:
    """A read-only view of a stream that yields at most ``budget`` bytes, so a header parser cannot inflate more."""

    def __init__(self, raw: Any, budget: int) -> None:
        self._raw = raw
        self._left = budget
        self.consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        n = self._left if size is None or size < 0 else min(size, self._left)
        if n <= 0:
            return b""
        data = self._raw.read(n)
        self._left -= len(data)
        self.consumed += len(data)
        return data


@dataclass(frozen=True)
class _Header:
    key: str
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype[Any]
    header_len: int
    payload: int


def _check_members(zf: zipfile.ZipFile, max_bytes: int, max_members: int) -> list[tuple[str, zipfile.ZipInfo]]:
    """Names, count, flags and declared sizes, all from the central directory: nothing is inflated yet."""
    infos = zf.infolist()
    if len(infos) > max_members:
        raise HostileData(f"archive has {len(infos)} members, more than the {max_members} allowed")
    seen: set[str] = set()
    members: list[tuple[str, zipfile.ZipInfo]] = []
    total = 0
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise HostileData(f"member {quoted_name(name)} is not a .npy file")
        key = name[: -len(".npy")]
        if not _SAFE_NAME.fullmatch(key) or ".." in key or key.startswith("/"):
            raise HostileData(f"member {quoted_name(name)} has an unsafe name")
        if name in seen:
            raise HostileData(f"member {quoted_name(name)} appears twice")
        seen.add(name)
        if info.flag_bits & 0x1:
            raise HostileData(f"member {quoted_name(name)} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise HostileData(f"member {quoted_name(name)} uses compression method {info.compress_type}, not stored or deflated")
        if info.file_size > max_bytes:
            raise HostileData(
                f"member {quoted_name(name)} claims {info.file_size} bytes uncompressed, more than the {max_bytes} allowed"
            )
        total += info.file_size
        if total > max_bytes:
            raise HostileData(f"members claim {total}+ bytes uncompressed in all, more than the {max_bytes} allowed")
        members.append((key, info))
    return members


def _read_header(zf: zipfile.ZipFile, key: str, info: zipfile.ZipInfo, max_bytes: int) -> _Header:
    """Only the .npy header of one member, read through a bounded stream; refuses pickles and lying sizes."""
    name = quoted_name(info.filename)
    with zf.open(info) as raw:
        fp = _Bounded(raw, _NPY_HEADER_BUDGET)
        try:
            version = npy_format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(fp)
            elif version == (2, 0):
                shape, fortran, dtype = npy_format.read_array_header_2_0(fp)
            else:
                raise HostileData(f"member {name} has .npy format version {version}, not 1.0 or 2.0")
        except HostileData:
            raise
        except (ValueError, TypeError, SyntaxError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError) as err:
            raise HostileData(f"member {name} has a bad .npy header: {_one_line(err)}") from None
        header_len = fp.consumed
    if dtype.hasobject:
        raise HostileData(f"member {name} holds Python objects (dtype {dtype.str}), refused: loading them would unpickle")
    if dtype.names is not None or dtype.subdtype is not None:
        raise HostileData(f"member {name} has a structured dtype, refused")
    if len(shape) > _MAX_NDIM or any(type(d) is not int or d < 0 for d in shape):
        raise HostileData(f"member {name} has an invalid shape {clean(repr(shape), 100)}")
    payload = math.prod(shape) * dtype.itemsize
    if payload > max_bytes:
        raise HostileData(f"member {name} header claims {payload} bytes of data, more than the {max_bytes} allowed")
    if header_len + payload != info.file_size:
        raise HostileData(
            f"member {name} header says shape {shape} of {dtype.str} ({payload} bytes after a {header_len}-byte header)"
            f" but the member holds {info.file_size} bytes"
        )
    return _Header(key, info, tuple(shape), bool(fortran), dtype, header_len, payload)


def _read_payload(zf: zipfile.ZipFile, h: _Header) -> np.ndarray:
    """The array data, read into one preallocated buffer; never more than the header-derived size plus one byte."""
    if h.payload == 0:
        return np.empty(h.shape, h.dtype, order="F" if h.fortran else "C")
    buf = bytearray(h.payload)
    view = memoryview(buf)
    with zf.open(h.info) as raw:
        raw.read(h.header_len)
        got = 0
        while got < h.payload:
            chunk = raw.read(min(_READ_CHUNK, h.payload - got))
            if not chunk:
                break
            view[got : got + len(chunk)] = chunk
            got += len(chunk)
        if got != h.payload:
            raise HostileData(f"member {quoted_name(h.info.filename)} ends after {got} of {h.payload} data bytes")
        if raw.read(1):
            raise HostileData(f"member {quoted_name(h.info.filename)} holds more data than its header says")
    flat = np.frombuffer(buf, dtype=h.dtype)  # a bytearray is writable: no copy needed
    if h.fortran:
        return flat.reshape(h.shape[::-1]).transpose()
    return flat.reshape(h.shape)


def _apply_schema(headers: list[_Header], schema: Mapping[str, ArraySpec], extra: bool) -> None:
    """Keys, kinds and shapes against the schema, on headers only, so a refused array is never allocated."""
    by_key = {h.key: h for h in headers}
    for key, spec in schema.items():
        if key not in by_key and not spec.optional:
            raise HostileData(f"array {key!r} is missing")
    if not extra:
        for h in headers:
            if h.key not in schema:
                raise HostileData(f"array {quoted_name(h.key)} is not expected")
    symbols: dict[str, tuple[int, str]] = {}
    for h in headers:
        spec = schema.get(h.key)
        if spec is None:
            continue
        if h.dtype.kind not in spec.kinds:
            raise HostileData(f"array {h.key!r} has dtype {h.dtype.str} (kind {h.dtype.kind!r}), not one of {spec.kinds!r}")
        if spec.shape is None:
            continue
        if len(h.shape) != len(spec.shape):
            raise HostileData(f"array {h.key!r} has shape {h.shape}, expected {len(spec.shape)} dims {spec.shape}")
        for axis, (size, want) in enumerate(zip(h.shape, spec.shape, strict=True)):
            if isinstance(want, int) and size != want:
                raise HostileData(f"array {h.key!r} has shape {h.shape}, expected {spec.shape}")
            if isinstance(want, str):
                first = symbols.setdefault(want, (size, f"{h.key!r} axis {axis}"))
                if first[0] != size:
                    raise HostileData(f"array {h.key!r} axis {axis} has {want}={size} but {first[1]} has {want}={first[0]}")


def load_npz(
    data: bytes,
    *,
    max_bytes: int,
    schema: Mapping[str, ArraySpec] | None = None,
    max_members: int = 4096,
    extra: bool = True,
) -> dict[str, np.ndarray]:
    """Parse an in-memory ``.npz`` without ever inflating or allocating more than ``max_bytes``.

    ``numpy.load`` trusts declared sizes and inflates on access; here every size is checked first (the
    central directory, then each .npy header through a bounded stream), object and structured dtypes are
    refused (no unpickling), payloads are read with a bounded read (zipfile stops at the declared size and
    checks the CRC), and ``schema`` is applied to headers before any payload is read.
    """
    if len(data) > max_bytes:
        raise HostileData(f"archive is {len(data)} bytes, more than the {max_bytes} allowed")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            members = _check_members(zf, max_bytes, max_members)
            headers = [_read_header(zf, key, info, max_bytes) for key, info in members]
            if schema is not None:
                _apply_schema(headers, schema, extra)
            return {h.key: _read_payload(zf, h) for h in headers}
    except HostileData:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        ValueError,
        OSError,
        EOFError,
        NotImplementedError,
        RuntimeError,
        OverflowError,
        UnicodeDecodeError,
        KeyError,
        IndexError,
        TypeError,
    ) as err:
        raise HostileData(f"not a valid .npz archive: {_one_line(err)}") from None


# --------------------------------------------------------------------------------------------------------------------
# JSON

_MAX_JSON_STRING = 1 << 20


def _refuse_constant(name: str) -> Any:
    raise HostileData(f"JSON holds {name}, refused")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise HostileData(f"JSON number {clean(text, 40)} overflows to infinity")
    return value


def load_json(data: bytes, *, max_bytes: int = 1 << 20, max_depth: int = 16, max_items: int = 100_000) -> Any:
    """Bounded JSON: size, encoding, nesting depth, value count and string length are all capped.

    NaN/Infinity (and numbers that overflow to infinity) are refused: they are not JSON, and a hostile
    metric that compares as nothing would slip past threshold checks.
    """
    if len(data) > max_bytes:
        raise HostileData(f"JSON is {len(data)} bytes, more than the {max_bytes} allowed")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as err:
        raise HostileData(f"JSON is not UTF-8: {_one_line(err)}") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except HostileData:
        raise
    except RecursionError:
        raise HostileData(f"JSON nests deeper than the {max_depth} levels allowed") from None
    except (ValueError, TypeError, OverflowError) as err:  # JSONDecodeError, int digit limits
        raise HostileData(f"not valid JSON: {_one_line(err)}") from None
    # walk without recursion: depth, count, string length
    count = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > max_items:
            raise HostileData(f"JSON holds more than the {max_items} values allowed")
        if isinstance(item, dict | list):
            if depth + 1 > max_depth:
                raise HostileData(f"JSON nests deeper than the {max_depth} levels allowed")
            if isinstance(item, dict):
                for k, v in item.items():
                    if len(k) > _MAX_JSON_STRING:
                        raise HostileData(f"JSON key of {len(k)} characters, more than the {_MAX_JSON_STRING} allowed")
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str) and len(item) > _MAX_JSON_STRING:
            raise HostileData(f"JSON string of {len(item)} characters, more than the {_MAX_JSON_STRING} allowed")
    return value


# --------------------------------------------------------------------------------------------------------------------
# files

# O_NONBLOCK: opening a FIFO the sandbox left must not hang us (it is then refused as not a regular file);
# O_NOCTTY: a terminal device must never become our controlling terminal.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def tail(path: Path, max_bytes: int = 65536) -> bytes:
    """The last ``max_bytes`` of a file (a log a sandbox may have grown without bound): never reads the whole file.

    A symlink at ``path`` is refused (it could point at a file the attack must not read through us).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise HostileData(f"{quoted_name(str(path))} is a symlink, refused") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HostileData(f"{quoted_name(str(path))} is not a regular file")
        offset = max(0, st.st_size - max_bytes)
        parts: list[bytes] = []
        got = 0
        while got < max_bytes:
            chunk = os.pread(fd, min(_READ_CHUNK, max_bytes - got), offset + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


_SYS_OPENAT2 = 437  # the same number on every architecture (the generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_OPENAT2_TRIES = 8


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: Any = None


def _openat2(dir_fd: int, path: bytes, flags: int, resolve: int) -> int:
    """openat2(2) through ctypes (the standard library has no wrapper); OSError(ENOSYS) where unavailable."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.syscall.restype = ctypes.c_long
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    if _libc is False:
        raise OSError(errno.ENOSYS, "no libc syscall()")
    how = _OpenHow(flags=flags, mode=0, resolve=resolve)
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(path))
    return int(fd)


def _components(relpath: str) -> list[str]:
    """Refuse what could leave ``dir_fd`` or be ambiguous before any system call sees it."""
    if not relpath:
        raise HostileData("empty path, refused")
    if "\x00" in relpath:
        raise HostileData(f"path {quoted_name(relpath)} holds a NUL byte, refused")
    if relpath.startswith("/"):
        raise HostileData(f"path {quoted_name(relpath)} is absolute, refused")
    parts = relpath.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise HostileData(f"path {quoted_name(relpath)} has an empty, '.' or '..' component, refused")
    return parts


def _walk(dir_fd: int, parts: list[str]) -> int:
    """Fallback without openat2: one component at a time, each opened with O_NOFOLLOW beneath the last."""
    fd = dir_fd
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = _OPEN_FLAGS if last else _OPEN_FLAGS | os.O_DIRECTORY
            nxt = os.open(part, flags, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


def open_beneath(dir_fd: int, relpath: str) -> int:
    """Open ``relpath`` read-only beneath ``dir_fd`` without following any link (symlink, magic link, ``..``).

    A sandbox controls that tree: a link anywhere on the path could send a trusted reader to the truth.
    Uses openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS); where the kernel (or a
    seccomp filter) lacks it, walks component by component with O_NOFOLLOW. Returns a descriptor the caller
    closes. Other OS errors (e.g. FileNotFoundError) propagate unchanged.
    """
    parts = _components(relpath)
    resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
    try:
        for _ in range(_OPENAT2_TRIES):
            try:
                return _openat2(dir_fd, os.fsencode(relpath), _OPEN_FLAGS, resolve)
            except OSError as err:
                if err.errno == errno.EAGAIN:  # a rename raced the lookup (the sandbox may do this on purpose)
                    continue
                if err.errno not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter that denies unknown calls
                    raise
                return _walk(dir_fd, parts)
        raise HostileData(f"path {quoted_name(relpath)} kept changing while being opened, refused")
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EXDEV):
            raise HostileData(f"path {quoted_name(relpath)} is a link or goes through one, refused") from None
        if err.errno == errno.ENOTDIR and len(parts) > 1:
            # the fallback's O_DIRECTORY|O_NOFOLLOW answers ENOTDIR for an intermediate symlink
            raise HostileData(f"path {quoted_name(relpath)} goes through a link or a non-directory, refused") from None
        raise


def read_beneath(dir_fd: int, relpath: str, max_bytes: int) -> bytes:
    """A whole regular file beneath ``dir_fd``, bounded: no links (hard links included), at most ``max_bytes``.

    A hard link needs no symlink to point outside the tree (the sandbox may link a file it can see), so a
    file with more than one link is refused. The size is checked on the descriptor, then re-checked on read
    (the sandbox may still be growing the file).
    """
    fd = open_beneath(dir_fd, relpath)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HostileData(f"{quoted_name(relpath)} is not a regular file")
        if st.st_nlink != 1:
            raise HostileData(f"{quoted_name(relpath)} has {st.st_nlink} hard links, refused")
        if st.st_size > max_bytes:
            raise HostileData(f"{quoted_name(relpath)} is {st.st_size} bytes, more than the {max_bytes} allowed")
        parts: list[bytes] = []
        got = 0
        while got <= max_bytes:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > max_bytes:
            raise HostileData(f"{quoted_name(relpath)} grew past the {max_bytes} bytes allowed while being read")
        return b"".join(parts)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------------------------
# logs


class LogSink:
    """Drains a sandboxed process's stdout/stderr pipe into a capped log file and a bounded in-memory tail.

    The pipe must never fill (a blocked writer would hang the attack past its deadline), the disk must not
    fill either, and memory must not grow with a flood: so the thread reads 64 KiB at a time, writes until the
    log file holds ``cap`` bytes, then only counts. What the file held when opened counts toward the cap: a lane
    started again after a death appends to its attack's log, and gets no fresh cap (each start adds at most the cap
    notice). The caller closes its own copy of the pipe's write end after spawning,
    or EOF never comes. ``close`` waits for EOF up to ``timeout``, then stops the thread regardless.
    """

    NOTICE = "[leakbed: log cap of {cap} bytes reached; the rest is counted, not written]"
    _CHUNK = 64 * 1024
    _POLL_MS = 100

    def __init__(self, read_fd: int, path: Path, cap: int, tail_bytes: int = 8192) -> None:
        self._read_fd = read_fd
        self._cap = cap
        self._tail_bytes = tail_bytes
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._written = 0
        self._dropped = 0
        self._closed = False
        self._capped = False
        self._ends_line = True
        self._log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        st = os.fstat(self._log_fd)
        self._held = st.st_size if stat.S_ISREG(st.st_mode) else 0  # an earlier process's lines: they count toward the cap
        self._thread = threading.Thread(target=self._run, name=f"logsink-{Path(path).name}", daemon=True)
        self._thread.start()

    @property
    def written(self) -> int:
        """Bytes of the stream written to the log file (the cap notice not counted)."""
        return self._written

    @property
    def dropped(self) -> int:
        """Bytes of the stream read but not written (past the cap, or the disk refused them)."""
        return self._dropped

    def tail(self) -> bytes:
        """A copy of the last ``tail_bytes`` read from the pipe."""
        with self._lock:
            return bytes(self._tail)

    def _write_all(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.write(self._log_fd, view[done:])
        return done

    def _keep(self, chunk: bytes) -> None:
        with self._lock:
            if len(chunk) >= self._tail_bytes:
                self._tail[:] = chunk[len(chunk) - self._tail_bytes :] if self._tail_bytes else b""
            else:
                self._tail += chunk
                excess = len(self._tail) - self._tail_bytes
                if excess > 0:
                    del self._tail[:excess]

    def _file(self, chunk: bytes) -> None:
        """Up to the cap into the log file, then one notice line, then only counting."""
        part = chunk[: max(0, self._cap - self._held - self._written)] if self._log_fd >= 0 else b""
        self._dropped += len(chunk) - len(part)
        try:
            if part:
                self._write_all(part)
                self._ends_line = part.endswith(b"\n")
        except OSError:  # disk full, quota: stop writing, keep draining so the writer never blocks
            self._dropped += len(part)
            self._stop_writing()
            return
        self._written += len(part)
        if len(part) < len(chunk) and not self._capped and self._log_fd >= 0:
            self._capped = True
            lead = "" if self._ends_line else "\n"
            try:
                self._write_all(f"{lead}{self.NOTICE.format(cap=self._cap)}\n".encode())
            except OSError:
                self._stop_writing()

    def _stop_writing(self) -> None:
        if self._log_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = -1

    def _run(self) -> None:
        try:
            poller = select.poll()
            poller.register(self._read_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            while not self._stop.is_set():
                if not poller.poll(self._POLL_MS):
                    continue
                try:
                    chunk = os.read(self._read_fd, self._CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                self._keep(chunk)
                self._file(chunk)
        finally:
            self._stop_writing()
            with contextlib.suppress(OSError):
                os.close(self._read_fd)

    def close(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` s for EOF, then stop the thread; it closes the log file and the read end."""
        if self._closed:
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()  # the thread sees this within one poll interval; closing fds under it would race
            self._thread.join()
        self._closed = True
