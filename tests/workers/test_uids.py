"""A sandbox uid's lease is given back once, whichever threads end its sandbox at the same time."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from leakbed.workers import uids


def test_a_lease_released_by_two_threads_at_once_closes_its_fd_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's reader polls its sandbox while the pool's close waits on it: both release the lease. A suite run
    saw the second close fail (EBADF, the ServerApp's close raised); it could as well close a file that took the
    number meanwhile. The close is slowed here so that both threads are inside ``release`` together."""
    fd = os.open(tmp_path / "slot", os.O_RDWR | os.O_CREAT, 0o600)
    lease = uids.Lease(uids.FIRST, fd)
    real_close, closed = os.close, []

    def slow_close(n: int) -> None:
        if n == fd:
            closed.append(n)
            time.sleep(0.05)
        real_close(n)

    monkeypatch.setattr(uids.os, "close", slow_close)
    errors: list[BaseException] = []

    def release() -> None:
        try:
            lease.release()
        except OSError as err:
            errors.append(err)

    threads = [threading.Thread(target=release) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert closed == [fd] and not errors and lease.fd == -1
    lease.release()  # and again, later: nothing left to close
    assert closed == [fd]
