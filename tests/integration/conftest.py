"""Fixtures for tests that start real Flower processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.leftovers import Witness
from tests.integration.procs import Procs, find_pids


@pytest.fixture
def procs(tmp_path: Path):
    """Processes a test starts, all stopped at its end, with any SuperLink that appeared for this
    test's FLWR_HOME (flwr run may start a managed one); other SuperLinks on the machine are left alone."""
    procs = Procs(tmp_path / "logs")
    superlinks_before = find_pids(r"flower-superlink")
    try:
        yield procs
    finally:
        procs.adopt(find_pids(rf"flower-superlink.*{re.escape(str(tmp_path))}") - superlinks_before)
        procs.stop_all()
        left = find_pids(rf"flower-superlink.*{re.escape(str(tmp_path))}")
        assert not left, f"SuperLink(s) {sorted(left)} still running"


@pytest.fixture
def witness() -> Iterator[Witness]:
    """What a command the test starts with ``witness.env()`` leaves once it has exited (``leftovers.Witness``)."""
    with Witness() as found:
        yield found
