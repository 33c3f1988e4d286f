"""The pool against hostile numbers (``workers.numbers`` at work in ``workers.pool``): a reply header with a huge,
negative or too-late ``seconds`` fails that fit in one line without a retry, and the lane's thread and the other
attacks go on; a budget longer than the run's task deadline is cut to it; malformed outputs an attack builds on are
not handed over, and the refusal names the attack that wrote them.

The hostile side is a program in a lane's place (as in ``test_lane.py``), in the same sandbox with the same pipes,
for one output name only: every other lane runs leakbed's real one."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from leakbed.workers import Fit
from leakbed.workers.lane import LaneProcess
from leakbed.workers.sandbox import available
from tests.workers.test_pool import feed, make_pool, outputs, prefill_shadow

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")

FAKE = r"""
import io, json, os, sys, time
import numpy as np
from leakbed.workers.frames import MAGIC, PREFIX, read_frame, write_frame
args = sys.argv[1:]
fd_in, fd_out = int(args[args.index("--in") + 1]), int(args[args.index("--out") + 1])
read_frame(fd_in, max_body=0)
write_frame(fd_out, {"ok": True, "pid": os.getpid()})
how = BEHAVIOUR
while True:
    request = json.loads(read_frame(fd_in, max_body=1 << 20)[0])
    if request["op"] == "stop":
        sys.exit(0)
    if how == "hang":
        time.sleep(3600)
    head = {"huge": b'{"ok": true, "seconds": ' + b"9" * 400 + b"}", "negative": b'{"ok": true, "seconds": -1}',
            "late": b'{"ok": true, "seconds": 1e9}'}.get(how, b'{"ok": true, "seconds": 0.0}')
    buf = io.BytesIO()
    if how == "malformed":  # a ranking whose scores are one number per update, not one per update and class
        np.savez(buf, ids=np.asarray(IDS), classes=np.asarray(["user0", "user1"]), scores=np.ones(len(IDS)))
    else:
        np.savez(buf, ids=np.asarray(IDS), classes=np.asarray(["user0"]), scores=np.ones((len(IDS), 1)))
    body = buf.getvalue()
    os.write(fd_out, PREFIX.pack(MAGIC, len(head), len(body)) + head + body)
"""


def hostile_lane(monkeypatch: pytest.MonkeyPatch, output: str, behaviour: str, ids: list[str] | None = None) -> None:
    """The lane filed as ``output`` runs ``FAKE`` with ``behaviour``; every other lane is leakbed's."""
    spawn = LaneProcess._spawn

    def maybe(self: LaneProcess, command: list[str], fds: tuple[int, int], log_fd: int):  # noqa: ANN202
        if self.spec.output != output:
            return spawn(self, command, fds, log_fd)
        code = FAKE.replace("BEHAVIOUR", repr(behaviour)).replace("IDS", repr(ids or ["x"]))
        return spawn(self, [command[0], "-c", code, *command[3:]], fds, log_fd)

    monkeypatch.setattr(LaneProcess, "_spawn", maybe)


@pytest.mark.long
@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ("huge", "its seconds is an integer of 1329 bits, more than 2\\*\\*53"),
        ("negative", "its seconds is -1, outside \\[0, "),
        ("late", "its seconds is 1000000000.0, outside \\[0, "),
    ],
)
def test_a_malformed_reply_header_fails_that_fit_in_one_line(tmp_path: Path, decls, monkeypatch, behaviour, says) -> None:
    hostile_lane(monkeypatch, "evil", behaviour)
    pool = make_pool(tmp_path, decls, ("knn",), shadow=False, task_deadline=120.0)
    prefill_shadow(pool)
    try:
        feed(pool)
        assert pool.drain(60)
        t0 = time.monotonic()
        pool.fit([Fit("knn", output="evil"), "knn"], timeout=240)
        took = time.monotonic() - t0
    finally:
        pool.close()
    s = pool.stats
    assert not s.fitted("evil") and s.fitted("knn"), s.fit_seconds
    assert s.worker_restarts == 0 and s.retries == 0 and s.deadlines == 0, s  # failed at once: no second lane
    assert len(s.errors) == 1 and s.errors[0].startswith("fit task of attack 'evil' failed: attack 'evil' sent a malformed "
                                                         "reply (")
    assert re.search(says, s.errors[0]) and "\n" not in s.errors[0], s.errors
    assert took < 60, took  # not the fit's deadline (120 s): the lane's thread did not die with the number
    assert outputs(tmp_path, "knn")["scores"].shape == (6, 6) and not (tmp_path / "outputs" / "evil.npz").exists()


@pytest.mark.long
def test_a_budget_longer_than_the_runs_task_deadline_is_cut_to_it(tmp_path: Path, decls, monkeypatch) -> None:
    """``mlp`` declared (here) with ``epochs`` as its budget: a budget of 100,000 s (a day and more), and of 2 s."""
    budgeted = {**decls, "mlp": decls["mlp"].model_copy(update={"budget": "epochs"})}
    hostile_lane(monkeypatch, "mlp", "hang")
    pool = make_pool(tmp_path, budgeted, ("mlp",), shadow=False, task_deadline=4.0, overrides={"mlp": {"epochs": 100_000}})
    assert pool._deadline_of(Fit("mlp")) == 4.0 and pool._deadline_of(Fit("mlp", params={"epochs": 2})) == 2.0
    prefill_shadow(pool)
    try:
        feed(pool)
        assert pool.drain(60)
        t0 = time.monotonic()
        pool.fit(["mlp"], timeout=120)
        took = time.monotonic() - t0
    finally:
        pool.close()
    assert pool.stats.errors == ["deadline: fit task past its deadline of 4 s: attack 'mlp' was ended"], pool.stats.errors
    assert 4.0 <= took < 20, took


@pytest.mark.slow
def test_malformed_outputs_an_attack_builds_on_are_not_handed_over_and_named_where_they_were_made(
    tmp_path: Path, decls, monkeypatch
) -> None:
    """A third-party kNN returns a ranking whose scores have the wrong shape: metadata (built in, building on the
    closed-world attacks) runs without it, and the refusal is kNN's, not metadata's."""
    third_party = {**decls, "knn": decls["knn"].model_copy(update={"distribution": "someone-else"})}
    pool = make_pool(tmp_path, third_party, ("knn", "metadata"), shadow=False)
    prefill_shadow(pool)
    try:
        feed(pool)
        assert pool.drain(60)
        ids = [str(i) for i in pool._given(pool._run_id)]
        hostile_lane(monkeypatch, "knn", "malformed", ids)
        pool.fit(["metadata", "knn"], timeout=300)
    finally:
        pool.close()
    s = pool.stats
    assert s.fitted("knn") and s.fitted("metadata"), (s.fit_seconds, s.errors)
    assert s.errors == [
        "attack 'knn''s outputs were not handed to attack 'metadata', which builds on them: array 'scores' has shape "
        f"({len(ids)},), expected 2 dims ('n', 'k')"
    ], s.errors
    meta = outputs(tmp_path, "metadata")
    assert "weights_knn" not in meta and "fused_knn" not in meta and np.isfinite(meta["meta"]).all()
    assert not (tmp_path / "outputs" / "upstream-of" / "r" / "metadata" / "knn.npz").exists()
