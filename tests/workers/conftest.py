"""Fixtures of the ``workers/`` tests: the built-in attacks' declarations, introspected once in a sandbox and shared
by the test processes of a run (the introspection's own cache, keyed by content, in the run's temporary root)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from leakbed.core.declaration import Declaration
from tests.workers import kit


@pytest.fixture(scope="session")
def decls_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The declarations' cache folder of this run (xdist: the run's root, shared by its workers)."""
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if worker_id != "master" else base) / "workers-declarations"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def decls(decls_cache: Path) -> dict[str, Declaration]:
    with open(decls_cache / ".lock", "w") as lock:  # one worker introspects; the others then read its cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        return kit.introspect(decls_cache)
