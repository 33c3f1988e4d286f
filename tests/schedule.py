"""How the suite is spread over pytest-xdist workers (``--dist loadscope``, as ``scripts/test.sh`` runs it).

xdist's unit of work is then a test module, or a test class, so a module-scoped fixture (a federation
several tests read) is built once, on one worker; a class gives tests a unit of their own (the
compose tutorial's stack comes up beside the container tests' own). Units are handed out longest first,
from ``tests/timings.json``: what each unit took in a measured run of the whole suite
(``--write-timings``), because a long unit handed out last would end the run alone. xdist hands out
units in collection order and knows no durations, so the order is set here (``--no-loadscope-reorder``
keeps it). ``--dist loadgroup`` is not used: with pytest 9.2 xdist 3.8 cannot rename the node ids it
groups by, so it groups nothing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

TIMINGS = Path(__file__).resolve().parent / "timings.json"
UNMEASURED = {"slow": 60.0, "fast": 1.0}  # [s] a unit missing from timings.json: a guess by its marker


def unit_of(nodeid: str) -> str:
    """xdist's loadscope unit of a test: its module, or its class (``LoadScopeScheduling._split_scope``)."""
    return nodeid.rsplit("::", 1)[0]


def read_timings(path: Path = TIMINGS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def schedule(items: list[pytest.Item], timings: dict[str, float]) -> None:
    """Order the units longest first; items keep their order inside a unit."""
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        units[unit_of(item.nodeid)].append(item)

    def cost(unit: str) -> float:
        guess = UNMEASURED["slow" if any(i.get_closest_marker("slow") for i in units[unit]) else "fast"]
        return timings.get(unit, guess)

    items[:] = [item for unit in sorted(units, key=cost, reverse=True) for item in units[unit]]


class TimingsRecorder:
    """Adds up each unit's setup, call and teardown seconds over a run; writes them when it ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[unit_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        rows = dict(sorted(((k, round(v, 1)) for k, v in self.seconds.items()), key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps(rows, indent=1) + "\n")
