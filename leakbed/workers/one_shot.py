"""One call of trusted code into plugin code: a program of ``workers.inside`` whose only answer is what it writes to
a pipe, read bounded and by a deadline.

The introspection, the attacks' own checks and a plugin's scorer are such calls. Each runs in a sandbox (or, where
none can start, in a process of its own, never in the caller's), sees read-only only the folder trusted code wrote
for it, and is ended at once past its deadline or its bound, not after a grace. What comes back is hostile data for
the caller to parse (``workers.hostile``); its stderr is drained as it comes (a plugin filling it cannot stall the
call) and only its last line is kept, as its words.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from leakbed.core.plugin_text import plugin_text
from leakbed.workers.sandbox import INSIDE, Limits, Mount, Sandbox, end
from leakbed.workers.staging import StagingError

INPUTS = INSIDE / "inputs"  # where the called program reads its folder in a sandbox
STDERR_TAIL = 4096  # bytes of its stderr kept
EXIT_GRACE = 10.0  # [s] for a program that closed its pipe to exit


class NoAnswer(RuntimeError):
    """The program missed its deadline or wrote past its bound (it was ended), or its code could not be staged (one
    line)."""


@dataclass(frozen=True)
class Answer:
    data: bytes  # what it wrote to its pipe: hostile
    code: int  # its exit code
    last_words: str  # the last line of its stderr, as its words ('' if none)


def call_inside(
    module: str,
    args: Sequence[str] = (),
    *,
    what: str,
    limits: Limits | None,
    inputs: Path | None = None,
    deadline: float,
    max_bytes: int,
    plugins: Sequence[str] | None = None,
) -> Answer:
    """Run ``python -m module --out FD [--inputs DIR] args`` in a sandbox with ``limits`` (None: a process of its own)
    over the staged code of leakbed and of the attack distributions ``plugins`` (None: every one), and return its
    answer; NoAnswer, naming it ``what``, past ``deadline`` seconds or ``max_bytes``."""
    box = Sandbox(limits or Limits(), [Mount(inputs, INPUTS)] if inputs is not None else (), output=False, plugins=plugins)
    if limits is not None:
        try:
            box.staged()  # a distribution whose code cannot be staged is refused before anything starts
        except StagingError as err:
            raise NoAnswer(f"{what} cannot start: {err}") from None
    r, w = os.pipe()
    folder = ["--inputs", str(INPUTS if limits is not None else inputs)] if inputs is not None else []
    command = [sys.executable, "-m", module, "--out", str(w), *folder, *args]
    io = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    try:
        if limits is not None:
            proc = box.popen(command, pass_fds=(w,), **io)
        else:
            proc = subprocess.Popen(command, pass_fds=(w,), env=box.env(plain=True), close_fds=True,  # type: ignore[call-overload]
                                    start_new_session=True, **io)
    finally:
        os.close(w)
    tail = bytearray()
    drain = threading.Thread(target=_keep_tail, args=(proc.stderr, tail), daemon=True)
    drain.start()
    try:
        data = _read(r, time.monotonic() + deadline, max_bytes)
    except TimeoutError:
        end(proc)
        raise NoAnswer(f"{what} did not finish within {deadline:.0f} s; it was ended") from None
    except OverflowError:
        end(proc)
        raise NoAnswer(f"{what} wrote more than {max_bytes} bytes; it was ended") from None
    finally:
        os.close(r)
        try:
            proc.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            end(proc)
            proc.wait()
        drain.join(timeout=EXIT_GRACE)
    last = (tail.decode(errors="replace").strip().splitlines() or [""])[-1]
    return Answer(data, proc.returncode, plugin_text(last, "json", 300))


def _read(fd: int, until: float, limit: int) -> bytes:
    """All ``fd`` gives until its end; TimeoutError at ``until`` (monotonic), OverflowError past ``limit`` bytes."""
    chunks, size = [], 0
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        remaining = until - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        if not poller.poll(int(min(remaining, 1.0) * 1000)):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise OverflowError
        chunks.append(chunk)


def _keep_tail(stream: IO[bytes] | None, tail: bytearray) -> None:
    if stream is None:
        return
    with stream:
        for chunk in iter(lambda: stream.read1(1 << 16), b""):  # type: ignore[attr-defined]
            tail.extend(chunk)
            del tail[:-STDERR_TAIL]
