"""Fixtures of the ``workers/`` tests: the built-in attacks' declarations, introspected once in a sandbox and shared
by the test processes of a run (the introspection's own cache, keyed by content, in the run's temporary root)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from core.declaration import Declaration
from tests.workers import kit


@pytest.fixture(scope="session")
def decls(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> dict[str, Declaration]:
    base = tmp_path_factory.getbasetemp()
    root = base.parent if worker_id != "master" else base  # xdist: the run's root, shared by its workers
    cache = Path(root) / "workers-declarations"
    cache.mkdir(exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # one worker introspects; the others then read its cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        return kit.introspect(cache)
