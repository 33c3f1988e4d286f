"""One call into plugin code (``workers.one_shot.call_inside``), in a process of its own: its answer comes only from
its pipe, bounded and by a deadline, and a plugin that floods its stderr cannot stall the call."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leakbed.workers.one_shot import STDERR_TAIL, NoAnswer, call_inside

PROGRAM = """
import os, sys, time
fd = int(sys.argv[sys.argv.index('--out') + 1])
how = sys.argv[-1]
if how == 'flood-stderr':
    sys.stderr.write('x' * (4 << 20) + '\\nits last words\\n')
    sys.stderr.flush()
if how == 'hang':
    time.sleep(600)
if how == 'too-much':
    os.write(fd, b' ' * (1 << 20))
    time.sleep(600)
os.write(fd, b'{"ok": true}')
os.close(fd)
sys.exit(3 if how == 'flood-stderr' else 0)
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "lb_one_shot_probe.py").write_text(PROGRAM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "lb_one_shot_probe"


def test_a_flooded_stderr_does_not_stall_the_call_and_its_last_line_is_kept(module):
    t0 = time.monotonic()
    got = call_inside(module, ["flood-stderr"], what="the probe", limits=None, deadline=30, max_bytes=1024)
    assert time.monotonic() - t0 < 20  # 4 MiB through a 64 KiB pipe: drained as it came
    assert (got.data, got.code, got.last_words) == (b'{"ok": true}', 3, "its last words")
    assert STDERR_TAIL <= 1 << 16


@pytest.mark.parametrize(("how", "says"), [("hang", r"^the probe did not finish within 2 s; it was ended$"),
                                           ("too-much", r"^the probe wrote more than 1024 bytes; it was ended$")])
def test_past_its_deadline_or_its_bound_it_is_ended_at_once(module, how, says):
    t0 = time.monotonic()
    with pytest.raises(NoAnswer, match=says):
        call_inside(module, [how], what="the probe", limits=None, deadline=2, max_bytes=1024)
    assert time.monotonic() - t0 < 8  # not the exit grace (10 s) on top
