"""The frames a lane and trusted code exchange over a pair of pipes: a JSON header and a body of bytes.

A frame is ``b"LBF1"``, the header's length (4 bytes), the body's length (8 bytes), the header (UTF-8 JSON of an
object) and the body. Trusted code reads what a sandbox wrote as hostile data: lengths are checked against bounds
before anything is read, reads stop at a deadline, and the header is parsed by ``workers.hostile.load_json``.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

MAGIC = b"LBF1"
PREFIX = struct.Struct(">4sIQ")
MAX_HEADER = 64 * 1024  # bytes of a header


class FrameError(EOFError):
    """The other end closed its pipe, or wrote something that is not a frame (one line)."""


class FrameClosed(FrameError):
    """The other end closed its pipe (end of file): it is ending, or broke off."""


class FrameDeadline(TimeoutError):
    """No whole frame arrived before the deadline."""


def encode(header: dict[str, Any], body: bytes = b"") -> bytes:
    head = json.dumps(header, allow_nan=False).encode()
    return PREFIX.pack(MAGIC, len(head), len(body)) + head + body


def write_frame(fd: int, header: dict[str, Any], body: bytes = b"") -> None:
    """Write one whole frame to ``fd`` (blocking)."""
    view = memoryview(encode(header, body))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(max(1, int(remaining * 1000))):
                raise FrameDeadline(f"no reply within the deadline ({n - left} of {n} bytes arrived)")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise FrameClosed("the other end closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, *, max_body: int, deadline: float | None = None) -> tuple[bytes, bytes]:
    """One frame from ``fd``: (raw header bytes, body), each length checked against its bound before it is read;
    ``deadline`` is a ``time.monotonic()`` instant (None: wait for ever, as the sandboxed side does)."""
    magic, head_len, body_len = PREFIX.unpack(_read_exact(fd, PREFIX.size, deadline))
    if magic != MAGIC:
        raise FrameError("not a frame (bad magic)")
    if head_len > MAX_HEADER:
        raise FrameError(f"a header of {head_len} bytes (more than {MAX_HEADER})")
    if body_len > max_body:
        raise FrameError(f"a body of {body_len} bytes (more than the {max_body} allowed)")
    return _read_exact(fd, head_len, deadline), _read_exact(fd, body_len, deadline)
