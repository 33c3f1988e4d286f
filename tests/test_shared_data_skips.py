"""Tests that read ../shared/data (FEMNIST, Shakespeare) skip alike where it is absent: a fresh clone without
../shared reports them skipped with one reason (tests/conftest.py's NO_SHARED_DATA), never errored or failed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# how a test reaches the shared data: the conftest's root, or a path of its own to ../shared/data
READS_DATA = re.compile(r"SHARED_DATA|\"shared\" / \"data\"|\.\./shared/data")
HERE = Path(__file__).resolve()

RECORDER = '''
import json, os, pytest

rows = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
    marked = item.get_closest_marker("shared_data") is not None
    rows.append({"id": item.nodeid, "when": report.when, "outcome": report.outcome, "marked": marked, "reason": reason})


def pytest_sessionfinish(session):
    with open(os.environ["LEAKBED_SKIP_ROWS"], "w") as f:
        json.dump(rows, f)
'''


def data_reading_files() -> list[Path]:
    """The test modules whose source reaches the shared data (the conftest and this file aside)."""
    skip = {HERE, REPO / "tests" / "conftest.py"}
    return sorted(p for p in (REPO / "tests").rglob("test_*.py") if p not in skip and READS_DATA.search(p.read_text()))


def test_every_module_that_reads_the_shared_data_marks_its_tests() -> None:
    files = data_reading_files()
    assert len(files) >= 10, files  # FEMNIST and Shakespeare: core loaders, integration runs, the fedavg plugin
    unmarked = [str(p.relative_to(REPO)) for p in files if 'mark.shared_data("' not in p.read_text()]
    assert not unmarked, f"these read ../shared/data without @pytest.mark.shared_data: {unmarked}"


@pytest.mark.slow  # a pytest process of its own
def test_without_the_data_root_every_such_test_skips_with_one_reason(tmp_path: Path) -> None:
    """The data root pointed away (LEAKBED_TEST_DATA; ../shared/data is never moved): every marked test, fast or slow,
    is skipped before its fixtures with NO_SHARED_DATA, and the same modules' other fast tests still pass."""
    (tmp_path / "skiprows.py").write_text(RECORDER)
    rows_file, absent = tmp_path / "rows.json", tmp_path / "no-such-data"
    env = {**os.environ, "LEAKBED_TEST_DATA": str(absent), "LEAKBED_SKIP_ROWS": str(rows_file)}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    files = [str(p.relative_to(REPO)) for p in data_reading_files()]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "skiprows", "-m", "shared_data or fast", *files]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    rows = json.loads(rows_file.read_text())
    marked = {r["id"] for r in rows if r["marked"]}
    assert len(marked) >= 20, sorted(marked)  # 12 FEMNIST/Shakespeare loader tests, 5 plugin, 7+ integration runs
    reason = f"needs the shared data (../shared/data, or LEAKBED_TEST_DATA), absent at {absent}"
    for r in rows:
        assert r["outcome"] != "failed", r  # an error in setup or teardown is reported as "failed" there
        if r["marked"] and r["when"] == "setup":
            assert r["outcome"] == "skipped" and r["reason"] == f"Skipped: {reason}", r
    unmarked_run = {r["id"] for r in rows if not r["marked"] and r["when"] == "call" and r["outcome"] == "passed"}
    assert len(unmarked_run) >= 10, sorted(unmarked_run)  # the loaders' synthetic-file tests ran: the skip is targeted
