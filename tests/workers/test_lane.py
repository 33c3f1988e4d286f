"""A lane from trusted code's side (``workers.lane.LaneProcess``): it opens and answers in its sandbox; an attack's
error comes back as its words; a death, a deadline, an oversized or malformed reply and a flood of output each end
in one bounded, labelled line and leave no process behind.

Two kinds of lane run here: the real one (``workers.inside.lane``) with built-in attacks, and a hostile program in
its place (``FAKE``, started in the same sandbox with the same pipes: what attack code that took over its lane's
process could write), for the replies no honest lane sends."""

from __future__ import annotations

import io
import json
import signal
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from leakbed.core.processes import alive, descendants
from leakbed.workers.hostile import LogSink
from leakbed.workers.lane import LaneBroke, LaneDeadline, LaneDied, LaneProcess, LaneSpec, TaskFailed, exit_meaning
from leakbed.workers.sandbox import Limits, available
from tests.integration.procs import wait_until
from tests.workers import kit

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")

FAKE = r"""
import json, os, sys, time
from leakbed.workers.frames import MAGIC, PREFIX, read_frame, write_frame
args = sys.argv[1:]
fd_in, fd_out = int(args[args.index("--in") + 1]), int(args[args.index("--out") + 1])
how = BEHAVIOUR
opening, _ = read_frame(fd_in, max_body=0)
print("lane opened", opening.decode(), flush=True)
write_frame(fd_out, {"ok": True, "pid": os.getpid()})
while True:
    raw, _ = read_frame(fd_in, max_body=1 << 20)
    op = json.loads(raw)["op"]
    if op == "stop" and how != "deaf":
        sys.exit(0)
    if how in ("ok", "deaf"):
        write_frame(fd_out, {"ok": True, "seconds": 0.0})
    elif how == "huge-body":
        os.write(fd_out, PREFIX.pack(MAGIC, 11, 1 << 40) + b'{"ok": true}')
        time.sleep(600)
    elif how == "huge-header":
        os.write(fd_out, PREFIX.pack(MAGIC, 1 << 30, 0) + b"{" * 1000)
        time.sleep(600)
    elif how == "bad-magic":
        os.write(fd_out, PREFIX.pack(b"EVIL", 2, 0) + b"{}")
        time.sleep(600)
    elif how == "not-json":
        os.write(fd_out, PREFIX.pack(MAGIC, 9, 0) + b"{not json")
        time.sleep(600)
    elif how == "no-ok":
        write_frame(fd_out, {"fine": True})
        time.sleep(600)
    elif how == "deep":
        head = ("[" * 5000 + "]" * 5000).encode()
        os.write(fd_out, PREFIX.pack(MAGIC, len(head), 0) + head)
        time.sleep(600)
    elif how in ("huge-seconds", "negative-seconds", "nan-seconds", "late-seconds", "huge-pid"):
        head = {"huge-seconds": b'{"ok": true, "seconds": ' + b"9" * 4000 + b"}",
                "negative-seconds": b'{"ok": true, "seconds": -5}', "nan-seconds": b'{"ok": true, "seconds": NaN}',
                "late-seconds": b'{"ok": true, "seconds": 86400}', "huge-pid": b'{"ok": true, "pid": 1e300}'}[how]
        os.write(fd_out, PREFIX.pack(MAGIC, len(head), 0) + head)
        time.sleep(600)
    elif how == "liar":
        said = '\x1b[2J\x1b[31mall clear\r\nleakbed: attack "knn" fitted in 0.1 s' + "x" * 50000
        write_frame(fd_out, {"ok": False, "error": said})
    elif how == "exit":
        print("Traceback (most recent call last):\nRuntimeError: out of ideas", file=sys.stderr, flush=True)
        os._exit(3)
    elif how == "segv":
        import ctypes, faulthandler
        faulthandler.enable()
        ctypes.string_at(0)
    elif how == "flood":
        line = b"y" * 1023 + b"\n"
        for _ in range(4096):
            os.write(2, line)
        write_frame(fd_out, {"ok": True, "seconds": 0.0})
    elif how == "hang":
        time.sleep(600)
"""


def fake_lanes(monkeypatch: pytest.MonkeyPatch, behaviour: str) -> None:
    """Lanes started from now on run ``FAKE`` with ``behaviour`` instead of ``workers.inside.lane``, in the same
    sandbox (or process) with the same pipes."""
    spawn = LaneProcess._spawn

    def hostile(self: LaneProcess, command: list[str], fds: tuple[int, int], log_fd: int):  # noqa: ANN202
        assert command[1:3] == ["-m", "leakbed.workers.inside.lane"]
        return spawn(self, [command[0], "-c", FAKE.replace("BEHAVIOUR", repr(behaviour)), *command[3:]], fds, log_fd)

    monkeypatch.setattr(LaneProcess, "_spawn", hostile)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prior's inputs as the pool files them: knowledge, two rounds, six anonymous and twelve shadow updates."""
    return kit.fill_store(tmp_path_factory.mktemp("lane") / "run-seed-7" / "store" / "r")


def lane(tmp_path: Path, store: Path, attack: str = "fake", sandboxed: bool = True, **kw) -> LaneProcess:
    spec = LaneSpec(key=f"r/{attack}", kind="attack", attack=attack, output=attack, params=kw.pop("params", {}))
    return LaneProcess(spec, store, log_path=tmp_path / "logs" / f"{attack}.log", limits=Limits() if sandboxed else None,
                       **kw)


@pytest.fixture
def started(request: pytest.FixtureRequest):  # noqa: ANN201 - a list the test appends its lanes to; all are stopped
    lanes: list[LaneProcess] = []
    yield lanes
    for one in lanes:
        one.stop()


def inner(one: LaneProcess) -> int:
    """The lane's own process (bwrap's child, the sandbox's pid 1; unsandboxed: the process itself)."""
    if not one.sandboxed:
        return one.pid
    until = time.monotonic() + 30
    while not (kids := descendants(one.pid)) and time.monotonic() < until:
        time.sleep(0.01)
    assert len(kids) == 1, kids  # bwrap's only child: the sandbox's pid 1 (--as-pid-1)
    return kids[0]


def one_line(text: str, limit: int = 600) -> None:
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and len(text) <= limit, text


# --------------------------------------------------------------------------------------------------------------------
# the real lane, with built-in attacks


def test_a_lane_opens_in_its_sandbox_and_answers(tmp_path, store, started):
    one = lane(tmp_path, store, "knn", params={"k": 3})
    started.append(one)
    one.start()
    assert 0 < one.start_seconds < 60
    header, body = one.call({"op": "ping"}, 30)
    assert header["ok"] is True and header["pid"] == 1 and body == b""  # pid 1: its own PID namespace
    header, body = one.call({"op": "fit"}, 120)
    assert header["ok"] is True and 0 < header["seconds"] < 120
    with np.load(io.BytesIO(body), allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    users = sorted(kit.knowledge()[0].prior)
    assert sorted(out) == ["classes", "ids", "rounds", "scores"] and sorted(map(str, out["classes"])) == users
    assert out["scores"].shape == (6, 6) and np.allclose(out["scores"].sum(axis=1), 1.0)  # kNN: probabilities
    # nothing of the host's layout reaches its process: not in its command line, nor in its environment
    pid = inner(one)
    seen = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
    assert b"leakbed.workers.inside.lane" in seen and str(store).encode() not in seen and b"run-seed-7" not in seen


def test_an_attack_that_raises_fails_its_task_in_its_own_words_and_the_lane_lives_on(tmp_path, store, started):
    one = lane(tmp_path, store, "knn")
    started.append(one)
    one.start()
    with pytest.raises(TaskFailed) as err:
        one.call({"op": "round", "round": 99}, 60)  # no global model of round 99: the hook raises
    said = str(err.value)
    assert said.startswith("attack 'knn' said: \"FileNotFoundError: ") and said.endswith('"'), said
    assert "/leakbed/inputs/global/r000099.npz" in said and str(store) not in said  # the path it sees, not the host's
    one_line(said)
    assert one.alive() and one.call({"op": "ping"}, 30)[0]["ok"] is True
    # its traceback, in its own log: a trusted thread copies the lane's output there (workers.lane.LogSink), on a pipe
    # of its own, so it may land a moment after the reply
    log = tmp_path / "logs" / "knn.log"
    wait_until(lambda: "FileNotFoundError" in log.read_text(), 10, "the traceback in the lane's log", interval=0.1)


def test_a_lane_that_dies_mid_task_says_how_with_its_last_words_labelled(tmp_path, store, started):
    one = lane(tmp_path, store, "mlp", params={"epochs": 100_000})
    started.append(one)
    one.start()
    with pytest.raises(TaskFailed):
        one.call({"op": "round", "round": 99}, 60)  # its log now ends with its error
    pid = inner(one)
    t0 = time.monotonic()
    with pytest.raises(LaneDied) as err:
        threading.Thread(target=kit.kill_when_busy, args=(pid, 0.5), daemon=True).start()
        one.call({"op": "fit"}, 300)
    died = str(err.value)
    assert time.monotonic() - t0 < 60
    assert died.startswith("SIGKILL: the kernel's OOM killer, a deadline, or a kill; attack 'mlp' said: \""), died
    assert "FileNotFoundError" in died  # the last line of its log, quoted
    one_line(died, 200 + 120)
    assert not one.alive()


def test_a_task_past_its_deadline_is_ended_and_its_lane_is_gone(tmp_path, store, started):
    one = lane(tmp_path, store, "mlp", params={"epochs": 100_000})
    started.append(one)
    one.start()
    pids = [one.pid, inner(one)]
    t0 = time.monotonic()
    with pytest.raises(LaneDeadline, match=r"^fit task past its deadline of 1 s: attack 'mlp' was ended$"):
        one.call({"op": "fit"}, 1.0)
    took = time.monotonic() - t0
    assert 1.0 <= took < 5.0, took
    assert kit.gone_within(pids, 3.0), [p for p in pids if alive(p)]
    print(f"deadline of 1 s: the call returned after {took:.2f} s")


@pytest.mark.long
def test_a_reply_larger_than_allowed_is_refused_without_reading_it(tmp_path, store, started):
    one = lane(tmp_path, store, "knn", max_reply=1000)
    started.append(one)
    one.start()
    with pytest.raises(LaneDied, match=r"^attack 'knn' broke the lane protocol \(a body of \d+ bytes \(more than the "
                                       r"1000 allowed\)\); it was ended$"):
        one.call({"op": "fit"}, 120)
    assert not one.alive()


# --------------------------------------------------------------------------------------------------------------------
# a hostile program in the lane's place


def test_a_hostile_lane_that_announces_a_terabyte_is_refused_at_once(tmp_path, store, started, monkeypatch):
    fake_lanes(monkeypatch, "huge-body")
    one = lane(tmp_path, store)
    started.append(one)
    one.start()
    pids = [one.pid, inner(one)]
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(LaneDied, match=r"broke the lane protocol \(a body of 1099511627776 bytes \(more than the "
                                           r"268435456 allowed\)\); it was ended"):
            one.call({"op": "fit"}, 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 5 and peak < 1 << 20, peak  # refused on its length, not read
    assert kit.gone_within(pids, 3.0)


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ("huge-header", r"broke the lane protocol \(a header of 1073741824 bytes \(more than 65536\)\)"),
        ("bad-magic", r"broke the lane protocol \(not a frame \(bad magic\)\)"),
        ("not-json", r"sent a malformed reply \(.*\); it was ended"),
        ("no-ok", r"sent a malformed reply \(a reply header without 'ok'\); it was ended"),
        ("deep", r"sent a malformed reply \(.*\); it was ended"),
        ("huge-seconds", r"sent a malformed reply \(its seconds is an integer of 13288 bits, more than 2\*\*53\); it was ended"),
        ("negative-seconds", r"sent a malformed reply \(its seconds is -5, outside \[0, \d+(\.\d+)?\]\); it was ended"),
        ("nan-seconds", r"sent a malformed reply \(JSON holds NaN, refused\); it was ended"),
        ("late-seconds", r"sent a malformed reply \(its seconds is 86400, outside \[0, \d+(\.\d+)?\]\); it was ended"),
        ("huge-pid", r"sent a malformed reply \(its pid is 1e\+300, outside \[1, 4.1943e\+06\]\); it was ended"),
    ],
    ids=["huge-header", "bad-magic", "not-json", "no-ok", "deep", "huge-seconds", "negative-seconds", "nan-seconds",
         "late-seconds", "huge-pid"],
)
def test_a_malformed_reply_ends_the_lane_in_one_line(tmp_path, store, started, monkeypatch, behaviour, says):
    fake_lanes(monkeypatch, behaviour)
    one = lane(tmp_path, store)
    started.append(one)
    one.start()
    pids = [one.pid, inner(one)]
    t0 = time.monotonic()
    with pytest.raises(LaneDied, match=f"^attack 'fake' {says}") as err:
        one.call({"op": "fit"}, 30)
    if "malformed" in says or "a header of" in says or "bad magic" in says:  # a broken protocol: no retry
        assert isinstance(err.value, LaneBroke), type(err.value)
    assert time.monotonic() - t0 < 5
    one_line(str(err.value), 400)
    assert kit.gone_within(pids, 3.0)


def test_an_attacks_error_text_cannot_forge_a_leakbed_line(tmp_path, store, started, monkeypatch):
    fake_lanes(monkeypatch, "liar")
    one = lane(tmp_path, store)
    started.append(one)
    one.start()
    with pytest.raises(TaskFailed) as err:
        one.call({"op": "fit"}, 30)
    said = str(err.value)
    one_line(said, 340)
    assert said.startswith('attack \'fake\' said: "all clear leakbed: attack \\"knn\\" fitted in 0.1 sxxx')
    assert said.endswith('…"') and one.alive()  # cut, labelled, its quotes escaped; the lane goes on


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_a_lane_that_exits_says_its_exit_code_and_last_words(tmp_path, store, started, monkeypatch, sandboxed):
    fake_lanes(monkeypatch, "exit")
    one = lane(tmp_path, store, sandboxed=sandboxed)
    started.append(one)
    one.start()
    with pytest.raises(LaneDied) as err:
        one.call({"op": "fit"}, 30)
    assert str(err.value) == "exit code 3; attack 'fake' said: \"RuntimeError: out of ideas\""


def test_a_lane_that_crashes_in_native_code_says_so(tmp_path, store, started, monkeypatch):
    fake_lanes(monkeypatch, "segv")
    one = lane(tmp_path, store)
    started.append(one)
    one.start()
    with pytest.raises(LaneDied) as err:
        one.call({"op": "fit"}, 30)
    died = str(err.value)
    assert died.startswith("SIGSEGV: a crash in native code; attack 'fake' said: \"Fatal Python error: Segmentation fault")
    one_line(died, 400)


def test_a_lane_that_floods_its_output_gets_a_capped_log_and_is_not_blocked(tmp_path, store, started, monkeypatch):
    fake_lanes(monkeypatch, "flood")
    cap = 64 << 10
    one = lane(tmp_path, store, log_cap=cap)
    started.append(one)
    one.start()
    t0 = time.monotonic()
    assert one.call({"op": "fit"}, 30)[0]["ok"] is True  # 4 MiB written to its log pipe: drained, not blocking it
    assert time.monotonic() - t0 < 10
    one.stop()
    log = (tmp_path / "logs" / "fake.log").read_bytes()
    notice = LogSink.NOTICE.format(cap=cap).encode()
    assert log.startswith(b"lane opened {") and log.endswith(notice + b"\n")
    assert len(log) <= cap + len(notice) + 2 and log.count(notice) == 1


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_a_lane_that_ignores_stop_is_ended_and_leaves_nothing_behind(tmp_path, store, monkeypatch, sandboxed):
    """Past the grace, ``stop`` ends the lane: in a sandbox, bwrap and the sandbox's process (bwrap's death alone would
    not reach it); unsandboxed, the process and its folder on the host."""
    fake_lanes(monkeypatch, "deaf")
    one = lane(tmp_path, store, sandboxed=sandboxed)
    one.start()
    assert one.call({"op": "ping"}, 10)[0]["ok"] is True
    pids = [one.pid, *descendants(one.pid)]
    assert len(pids) == (2 if sandboxed else 1)
    scratch = one._scratch
    assert (scratch is None) == sandboxed and (sandboxed or scratch.is_dir())
    t0 = time.monotonic()
    one.stop(grace=0.5)
    assert time.monotonic() - t0 < 5
    assert kit.gone_within(pids, 3.0), [p for p in pids if alive(p)]
    assert scratch is None or not scratch.exists()


def test_the_opening_names_only_fixed_paths_inside_the_sandbox(tmp_path, store, started, monkeypatch):
    """What the lane is told: its inputs, its folder and its upstream at /leakbed paths, never the host's."""
    fake_lanes(monkeypatch, "ok")
    spec = LaneSpec(key="r/fake", kind="attack", attack="fake", output="fake", params={"a": 1}, upstream=("knn",),
                    peers={"knn": {"params": {"k": 3}, "score_kind": "probability", "builtin": True}})
    one = LaneProcess(spec, store, log_path=tmp_path / "logs" / "fake.log", limits=Limits(),
                      upstream_dir=tmp_path / "upstream")
    (tmp_path / "upstream").mkdir()
    started.append(one)
    one.start()
    one.stop()
    opening = json.loads((tmp_path / "logs" / "fake.log").read_text().splitlines()[0].removeprefix("lane opened "))
    assert opening == {"op": "open", "kind": "attack", "attack": "fake", "output": "fake", "params": {"a": 1},
                       "peers": spec.peers, "inputs": "/leakbed/inputs", "folder": "/leakbed/out",
                       "upstream": {"knn": "/leakbed/upstream/knn.npz"}}


@pytest.mark.parametrize(
    ("code", "meaning"),
    [
        (137, "SIGKILL: the kernel's OOM killer, a deadline, or a kill"),  # through bwrap: 128 + N
        (-9, "SIGKILL: the kernel's OOM killer, a deadline, or a kill"),  # a direct child
        (139, "SIGSEGV: a crash in native code"),
        (-6, "SIGABRT: an abort in native code"),
        (153, "SIGXFSZ: over its file-size limit"),
        (-int(signal.SIGTERM), "SIGTERM"),
        (3, "exit code 3"),
        (0, "exit code 0"),
        (128, "exit code 128"),
        (-33, "signal 33"),
    ],
)
def test_exit_meaning(code, meaning):
    assert exit_meaning(code) == meaning


def test_the_lane_log_names_its_lane():
    from leakbed.workers.lane import lane_header

    spec = LaneSpec(key="r/knn", kind="attack", attack="knn", output="knn")
    assert json.loads(lane_header(spec)) == {"lane": "r/knn", "kind": "attack", "attack": "knn", "output": "knn"}
    assert LaneSpec(key="r/s", kind="shadow").who == "the shadow training" and spec.who == "attack 'knn'"

