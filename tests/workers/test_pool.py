"""The attack pool (``workers.pool.AttackPool``): trusted writer of the attacks' inputs, one sandboxed lane per
attack and prior plus the shadow lane, checked outputs, deadlines, restarts, and the same through a remote attack
worker. Every property is shown on sandboxed lanes running leakbed's built-in attacks; a hostile shadow lane (a
program in the lane's place, as in ``test_lane.py``) shows what the pool refuses."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from leakbed.core import telemetry
from leakbed.core.processes import descendants
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore
from leakbed.workers import AttackPool, Fit
from leakbed.workers.lane import LaneProcess
from leakbed.workers.pool import SHADOW
from leakbed.workers.sandbox import Limits, available
from tests.workers import kit

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")


def metric(name: str, **labels: str) -> float:
    return telemetry.SERVER_REGISTRY.get_sample_value(name, labels or None) or 0.0


def make_pool(root: Path, decls: dict, names: tuple[str, ...], **kw) -> AttackPool:
    knowledge, _, _ = kit.knowledge()
    overrides = kw.pop("overrides", {})
    kw = {"count": 2, "queue_size": 16, "submit_timeout": 30, "run_id": "r", "sandbox": Limits(),
          "log_dir": root / "logs", **kw}
    return AttackPool(knowledge, root / "store", declarations=decls, params=kit.params(decls, *names, **overrides),
                      outputs=root / "outputs", **kw)


def feed(pool: AttackPool, rounds: tuple[int, ...] = (1, 2), per_round: int = 3, seed: int = 0, **train) -> None:
    rng = np.random.default_rng(seed)
    for rnd in rounds:
        pool.submit_round(kit.snapshot(rnd, **train))
        pool.submit_updates(kit.anon(rnd, per_round, rng))


def prefill_shadow(pool: AttackPool, rounds: tuple[int, ...] = (1, 2), seed: int = 1) -> None:
    """Shadow updates written into the run's store as the shadow lane would file them (for pools with shadow=False)."""
    knowledge, _, _ = kit.knowledge()
    users = sorted(knowledge.prior)
    rng = np.random.default_rng(seed)
    for rnd in rounds:
        pool._store.write_shadow(rnd, users, rng.normal(size=(len(users), kit.dim())).astype(np.float32))


def outputs(root: Path, name: str) -> dict[str, np.ndarray]:
    with np.load(root / "outputs" / f"{name}.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def given(root: Path, name: str) -> list[str]:
    return sorted(map(str, np.load(root / "outputs" / f"{name}.given.npy", allow_pickle=False)))


def lane_handle(pool: AttackPool, key: str, other_than: int = 0, timeout: float = 120.0) -> int:
    """The host pid (bwrap's) of lane ``key`` once started, other than ``other_than`` (a restarted lane)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        lane = pool._lanes.get(key)
        handle = lane.handle if lane is not None else None
        if handle is not None and handle.pid and handle.pid != other_than:
            return handle.pid
        time.sleep(0.02)
    raise AssertionError(f"lane {key} did not start")


def sandbox_pid1(bwrap: int, timeout: float = 30.0) -> int:
    until = time.monotonic() + timeout
    while not (kids := descendants(bwrap)) and time.monotonic() < until:
        time.sleep(0.01)
    return kids[0]


def started(pid: int) -> str:
    """When process ``pid`` started (so a reused pid is not taken for it); '' when there is none, or only its zombie
    (bwrap may exit before it reaps the sandbox's process: the host's init reaps it then)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


# --------------------------------------------------------------------------------------------------------------------
# one run, read by several tests: two rounds of three updates, the shadow lane, kNN and SVM fitted


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, decls) -> dict:
    root = tmp_path_factory.mktemp("pool")
    lanes: dict[str, dict] = {}
    start = LaneProcess.start

    def spy(self: LaneProcess) -> None:  # each lane's host pid and namespaces, once it is open
        start(self)
        pid1 = sandbox_pid1(self.pid)
        lanes[self.spec.key] = {"bwrap": self.pid, "pid1": pid1, "mnt": os.readlink(f"/proc/{pid1}/ns/mnt"),
                                "pidns": os.readlink(f"/proc/{pid1}/ns/pid"), "started": started(pid1)}

    counters = ("round", "ok"), ("fit", "ok"), ("round", "error"), ("fit", "error")
    before = {c: metric("leakbed_worker_tasks_total", kind=c[0], outcome=c[1]) for c in counters}
    before_stored = metric("leakbed_worker_updates_stored_total")
    before_durations = metric("leakbed_worker_task_duration_seconds_count", kind="fit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LaneProcess, "start", spy)
        pool = make_pool(root, decls, ("knn", "svm"))
        t0 = time.monotonic()
        try:
            feed(pool)
            assert pool.drain(300)
            pool.fit(["knn", "svm"], timeout=300)
        finally:
            pool.close()
    seconds = time.monotonic() - t0
    print(f"the pool's run (shadow lane, kNN and SVM lanes, sandboxed): {seconds:.1f} s")
    return {
        "root": root, "pool": pool, "lanes": lanes, "seconds": seconds,
        "tasks": {c: metric("leakbed_worker_tasks_total", kind=c[0], outcome=c[1]) - before[c] for c in counters},
        "stored": metric("leakbed_worker_updates_stored_total") - before_stored,
        "durations": metric("leakbed_worker_task_duration_seconds_count", kind="fit") - before_durations,
    }


@pytest.mark.slow
def test_everything_tapped_is_filed_or_counted(run):
    s = run["pool"].stats
    assert (s.tapped, s.analysed, s.dropped, s.failed) == (6, 6, 0, 0) and s.tapped == s.analysed + s.dropped + s.failed
    assert (s.rounds_submitted, s.rounds_analysed, s.rounds_dropped) == (2, 2, 0) and not s.errors, s.errors
    assert sorted(map(str, UpdateStore(run["root"] / "store" / "r").read_anon()["ids"])) == given(run["root"], "knn")


@pytest.mark.slow
def test_shadow_updates_are_computed_in_their_lane_and_filed(run):
    knowledge, _, _ = kit.knowledge()
    x, labels, rounds = UpdateStore(run["root"] / "store" / "r").read_shadow()
    assert x.shape == (12, kit.dim()) and x.dtype == np.float32 and np.isfinite(x).all()
    assert sorted(set(map(str, labels))) == sorted(knowledge.prior) and sorted(set(rounds)) == [1, 2]
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)  # L2-normalised, as the anonymous ones
    assert run["pool"].stats.shadow_seconds > 0


@pytest.mark.slow
def test_each_fit_produces_checked_outputs_and_the_ids_it_was_given(run):
    knowledge, _, _ = kit.knowledge()
    root = run["root"]
    ids = given(root, "knn")
    assert len(ids) == 6 and given(root, "svm") == ids
    for name in ("knn", "svm"):
        out = outputs(root, name)
        assert sorted(out) == ["classes", "ids", "rounds", "scores"]
        assert sorted(map(str, out["ids"])) == ids and sorted(map(str, out["classes"])) == sorted(knowledge.prior)
        assert out["scores"].shape == (6, 6) and np.isfinite(out["scores"]).all()
        assert run["pool"].stats.fitted(name) and 0 < run["pool"].stats.fit_seconds[name] < 300
    assert np.allclose(outputs(root, "knn")["scores"].sum(axis=1), 1.0)  # probabilities; the SVM's are margins
    assert sorted(p.name for p in (root / "outputs").iterdir()) == ["knn.given.npy", "knn.npz", "svm.given.npy", "svm.npz"]


@pytest.mark.slow
def test_each_attack_has_a_lane_of_its_own(run):
    """One sandbox per attack and prior: its own process, PID and mount namespaces (so its own /leakbed/out tmpfs),
    its own log; every task is counted under its lane."""
    lanes, s = run["lanes"], run["pool"].stats
    keys = {"r/" + SHADOW, "r/knn", "r/svm"}
    assert set(lanes) == keys and set(s.tasks_by_worker) == keys
    assert s.tasks_by_worker == {"r/" + SHADOW: 2, "r/knn": 1, "r/svm": 1} and s.lanes_started == 3
    assert len({v["bwrap"] for v in lanes.values()}) == 3 and len({v["pid1"] for v in lanes.values()}) == 3
    assert len({v["mnt"] for v in lanes.values()}) == 3 and len({v["pidns"] for v in lanes.values()}) == 3
    assert os.readlink("/proc/self/ns/mnt") not in {v["mnt"] for v in lanes.values()}
    logs = sorted(p.name for p in (run["root"] / "logs").iterdir())
    assert logs == ["r-knn.log", "r-shadow.training.log", "r-svm.log"]
    assert not any(started(v["pid1"]) == v["started"] for v in lanes.values())  # every lane ended with the pool


@pytest.mark.slow
def test_the_pool_exports_its_task_metrics(run):
    """A sandboxed lane has no network: the pool counts its tasks (leakbed_worker_*)."""
    assert run["tasks"] == {("round", "ok"): 2, ("fit", "ok"): 2, ("round", "error"): 0, ("fit", "error"): 0}
    assert run["stored"] == 6 and run["durations"] == 2


# --------------------------------------------------------------------------------------------------------------------
# failures, drops, restarts, deadlines


@pytest.mark.long
def test_a_fit_queued_while_its_lane_is_ending_is_served_by_a_new_lane(tmp_path, decls):
    """A lane thread that has decided to end (its queue empty, its last task done) while the final fit is queued: the
    fit once waited out its whole deadline (1,800 s in a full-suite run) for a thread that was stopping its sandbox."""
    pool = make_pool(tmp_path, decls, ("knn",), shadow=False)
    prefill_shadow(pool)
    release = threading.Event()
    try:
        feed(pool, rounds=(1,))
        assert pool.drain(60)
        pool.score(["knn"])
        assert pool.drain(120)
        lane = pool._lanes["r/knn"]
        ending, stop = threading.Event(), lane.handle.stop

        def slow_stop() -> None:
            ending.set()
            release.wait(30)
            stop()

        lane.handle.stop = slow_stop
        with pool._lock:
            lane.done = True  # the thread decides to end ...
        assert ending.wait(10)  # ... and is stopping its sandbox when the fit is queued
        threading.Timer(1.0, release.set).start()
        t0 = time.monotonic()
        pool.fit(["knn"], timeout=60)
    finally:
        release.set()
        pool.close()
    assert pool.stats.fitted("knn") and time.monotonic() - t0 < 50, pool.stats.errors
    assert pool.stats.lanes_started == 2  # a new lane served it


@pytest.mark.slow
def test_a_failing_task_is_counted_not_lost(tmp_path, decls):
    _, arrays, _ = kit.knowledge()
    pool = make_pool(tmp_path, decls, ("knn",))
    try:
        broken = {k: v[..., :1] for k, v in arrays.items()}  # wrong shapes: the shadow training fails on it
        pool.submit_round(RoundSnapshot(1, broken, kit.TRAIN))
        pool.submit_updates(kit.anon(1, 2, np.random.default_rng(1)))
        assert pool.drain(120)
    finally:
        pool.close()
    s = pool.stats
    assert (s.rounds_analysed, s.analysed, s.failed, s.worker_restarts) == (1, 2, 0, 0)
    assert len(s.errors) == 1 and s.errors[0].startswith("the shadow training failed: the shadow training said: \""), s.errors
    assert metric("leakbed_worker_tasks_total", kind="round", outcome="error") >= 1


def test_a_full_queue_counts_drops(tmp_path, decls, monkeypatch):
    """The writer is slowed down: a queue of one fills, what cannot wait is dropped and counted, never lost."""
    write = UpdateStore.write_global
    monkeypatch.setattr(UpdateStore, "write_global", lambda self, *a: time.sleep(0.3) or write(self, *a))
    pool = make_pool(tmp_path, decls, ("knn",), queue_size=1, submit_timeout=0.01, shadow=False)
    try:
        feed(pool, rounds=(1, 2, 3, 4, 5), per_round=2)
        assert pool.drain(60)
    finally:
        pool.close()
    s = pool.stats
    assert s.tapped == 10 and s.analysed + s.dropped + s.failed == s.tapped and s.dropped > 0 and s.failed == 0
    assert s.rounds_submitted == 5 and s.rounds_analysed + s.rounds_dropped == 5 and s.rounds_dropped > 0
    assert len(s.errors) == s.rounds_dropped + s.dropped // 2 and s.max_queue_depth == 1
    assert all("dropped: queue full for 0.01s" in e for e in s.errors), s.errors
    assert len(UpdateStore(tmp_path / "store" / "r").read_anon()["ids"]) == s.analysed


@pytest.mark.slow
def test_a_killed_lane_is_restarted_and_its_task_retried_once_then_failed_with_the_cause(tmp_path, decls):
    """``mlp-once``'s lane is killed mid-fit (SIGKILL: what the OOM killer sends): restarted, the fit retried and done.
    ``mlp-twice``'s is killed again after its restart: that fit fails with the cause of death, and kNN, fitted beside
    them, and later updates go on."""
    pool = make_pool(tmp_path, decls, ("mlp", "knn"), shadow=False, overrides={"mlp": {"epochs": 3000}})
    prefill_shadow(pool)
    kills: list[str] = []

    def killer(key: str, times: int) -> None:
        pid = 0
        for _ in range(times):
            pid = lane_handle(pool, key, other_than=pid)
            kit.kill_when_busy(sandbox_pid1(pid), busy=0.3)
            kills.append(key)

    try:
        feed(pool, rounds=(1, 2), per_round=3)
        assert pool.drain(60)
        threads = [threading.Thread(target=killer, args=("r/mlp-once", 1), daemon=True),
                   threading.Thread(target=killer, args=("r/mlp-twice", 2), daemon=True)]
        for t in threads:
            t.start()
        pool.fit([Fit("mlp", output="mlp-once"), Fit("mlp", output="mlp-twice"), "knn"], timeout=300)
        for t in threads:
            t.join(timeout=60)
        feed(pool, rounds=(3,), per_round=2, seed=3)
        assert pool.drain(60)
    finally:
        pool.close()
    s = pool.stats
    assert sorted(kills) == ["r/mlp-once", "r/mlp-twice", "r/mlp-twice"]
    assert s.worker_restarts == 3 and s.retries == 2, s
    assert s.fitted("mlp-once") and s.fitted("knn") and not s.fitted("mlp-twice")
    failed = [e for e in s.errors if "killed a second lane" in e]
    assert len(failed) == 1, s.errors
    assert failed[0].startswith("fit task killed a second lane of attack 'mlp-twice': SIGKILL: the kernel's OOM killer, "
                                "a deadline, or a kill"), failed
    died = [e for e in s.errors if e.endswith("restarted")]
    assert len(died) == 3 and all(e.startswith(("attack 'mlp-once'", "attack 'mlp-twice'")) for e in died), died
    assert (s.tapped, s.analysed, s.failed) == (8, 8, 0)
    assert outputs(tmp_path, "mlp-once")["scores"].shape == (6, 6) and not (tmp_path / "outputs" / "mlp-twice.npz").exists()


@pytest.mark.slow
def test_a_task_past_its_deadline_fails_with_deadline_and_the_others_finish(tmp_path, decls):
    pool = make_pool(tmp_path, decls, ("mlp", "knn"), shadow=False, task_deadline=6.0,
                     overrides={"mlp": {"epochs": 100_000}})
    prefill_shadow(pool)
    try:
        feed(pool)
        assert pool.drain(60)
        t0 = time.monotonic()
        pool.fit(["mlp", "knn"], timeout=120)
        took = time.monotonic() - t0
    finally:
        pool.close()
    s = pool.stats
    assert not s.fitted("mlp") and math.isnan(s.fit_seconds["mlp"]) and s.fitted("knn")
    assert s.deadlines == 1 and s.worker_restarts == 0
    assert s.errors == ["deadline: fit task past its deadline of 6 s: attack 'mlp' was ended"], s.errors
    assert 6.0 <= took < 30, took
    assert outputs(tmp_path, "knn")["scores"].shape == (6, 6) and not (tmp_path / "outputs" / "mlp.npz").exists()


def test_closing_the_pool_ends_a_running_task_at_once_and_restarts_nothing(tmp_path, decls):
    pool = make_pool(tmp_path, decls, ("mlp",), shadow=False, overrides={"mlp": {"epochs": 100_000}})
    prefill_shadow(pool)
    try:
        feed(pool, rounds=(1,))
        assert pool.drain(30)
        pool.fit(["mlp"], timeout=2)  # the caller stops waiting; the fit runs on
        bwrap = lane_handle(pool, "r/mlp")
        pids = [bwrap, sandbox_pid1(bwrap)]
    finally:
        t0 = time.monotonic()
        pool.close()
        took = time.monotonic() - t0
    s = pool.stats
    assert took < 5 and kit.gone_within(pids, 2.0), took
    assert s.lanes_started == 1 and s.worker_restarts == 0 and not s.fitted("mlp")
    assert s.errors == ["fit of mlp did not finish in time", "fit task of attack 'mlp' ended: the pool was closed"]
    assert all(lane.thread is None for lane in pool._lanes.values())  # each lane's thread left it
    assert not any(t.is_alive() for t in pool._threads)


@pytest.mark.slow
def test_interim_fits_reach_the_callback(tmp_path, decls):
    seen: list[tuple[str, bool]] = []
    snapshots: list[list[str]] = []

    def on_fit(name: str, partial: bool) -> None:
        seen.append((name, partial))
        snapshots.append(given(tmp_path, "knn"))

    pool = make_pool(tmp_path, decls, ("knn",), shadow=False, on_fit=on_fit)
    prefill_shadow(pool)
    try:
        feed(pool, rounds=(1,))
        assert pool.drain(60)
        pool.score(["knn"])
        assert pool.drain(120)
        partial = outputs(tmp_path, "knn")
        feed(pool, rounds=(2,), seed=1)
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    assert seen == [("knn", True), ("knn", False)] and s.partial_fits == 1 and s.fitted("knn")
    assert len(partial["ids"]) == 3 and len(outputs(tmp_path, "knn")["ids"]) == 6
    assert [len(g) for g in snapshots] == [3, 6]  # the ids each fit was given, filed beside its outputs
    assert s.lanes_started == 1 and s.tasks_by_worker == {"r/knn": 2}  # one lane served both


@pytest.mark.slow
def test_results_do_not_depend_on_how_many_lanes_run_at_once(tmp_path, decls):
    got = []
    for count in (1, 2):
        root = tmp_path / f"count{count}"
        pool = make_pool(root, decls, ("mlp", "knn"), count=count)
        try:
            feed(pool)
            pool.fit(["mlp", "knn"], timeout=300)
        finally:
            pool.close()
        assert not pool.stats.errors, pool.stats.errors
        got.append({n: outputs(root, n) for n in ("mlp", "knn")} | {SHADOW: UpdateStore(root / "store" / "r").read_shadow()})
    np.testing.assert_array_equal(got[0][SHADOW][0], got[1][SHADOW][0])
    np.testing.assert_array_equal(got[0][SHADOW][1], got[1][SHADOW][1])
    for name in ("mlp", "knn"):
        assert sorted(got[0][name]) == sorted(got[1][name])
        for key in got[0][name]:
            np.testing.assert_array_equal(got[0][name][key], got[1][name][key])


@pytest.mark.slow
def test_an_attack_that_builds_on_another_gets_its_outputs_once_written(tmp_path, decls):
    """``metadata`` builds on the suite's re-identification attacks (``family:reid``). kNN is declared here as a third
    party's, so metadata cannot refit it in its own lane: its fused scores exist only if the pool handed it kNN's
    checked outputs, which it does once they are written (metadata, named first, is fitted second)."""
    third_party = {**decls, "knn": decls["knn"].model_copy(update={"distribution": "someone-else"})}
    order: list[str] = []
    pool = make_pool(tmp_path, third_party, ("knn", "metadata"), shadow=False, on_fit=lambda n, p: order.append(n))
    prefill_shadow(pool)
    try:
        feed(pool)
        pool.fit(["metadata", "knn"], timeout=300)
    finally:
        pool.close()
    assert not pool.stats.errors, pool.stats.errors
    assert order == ["knn", "metadata"]
    knn, meta = outputs(tmp_path, "knn"), outputs(tmp_path, "metadata")
    handed = tmp_path / "outputs" / "upstream-of" / "r" / "metadata" / "knn.npz"
    assert handed.read_bytes() == (tmp_path / "outputs" / "knn.npz").read_bytes()
    assert "weights_knn" in meta and "fused_knn" in meta
    col = {str(c): j for j, c in enumerate(knn["classes"])}
    expected = knn["scores"][:, [col[str(u)] for u in meta["classes"]]]
    np.testing.assert_allclose(meta["weights_knn"], expected)


@pytest.mark.slow
def test_without_its_upstream_the_builder_runs_alone(tmp_path, decls):
    """The control: fitted without kNN in the batch, metadata has no kNN scores to fuse (it cannot refit a third
    party's attack), so the check above can fail."""
    third_party = {**decls, "knn": decls["knn"].model_copy(update={"distribution": "someone-else"})}
    pool = make_pool(tmp_path, third_party, ("knn", "metadata"), shadow=False)
    prefill_shadow(pool)
    try:
        feed(pool)
        pool.fit(["metadata"], timeout=300)
    finally:
        pool.close()
    assert pool.stats.fitted("metadata") and not pool.stats.errors
    assert "weights_knn" not in outputs(tmp_path, "metadata")


# --------------------------------------------------------------------------------------------------------------------
# hostile shadow lanes: what the pool refuses


SHADOW_FAKE = r"""
import io, json, os, sys
import numpy as np
from leakbed.workers.frames import read_frame, write_frame
args = sys.argv[1:]
fd_in, fd_out = int(args[args.index("--in") + 1]), int(args[args.index("--out") + 1])
read_frame(fd_in, max_body=0)
write_frame(fd_out, {"ok": True, "pid": os.getpid()})
while True:
    request = json.loads(read_frame(fd_in, max_body=1 << 20)[0])
    if request["op"] == "stop":
        sys.exit(0)
    labels, width = LABELS, WIDTH
    buf = io.BytesIO()
    np.savez(buf, labels=np.asarray(labels), vectors=np.ones((len(labels), width), np.float32))
    write_frame(fd_out, {"ok": True, "seconds": 0.0}, buf.getvalue())
"""


@pytest.mark.parametrize(
    ("labels", "width", "says"),
    [
        (["user0", "mallory"], None, "shadow updates labelled with 1 identities the attacker does not know"),
        (["user0", "user1"], 7, "shadow updates of 7 entries; the attack layers of round 1 hold 1290"),
        (["user0"] * 3, 0, None),  # honest: filed
    ],
    ids=["stranger", "wrong-width", "honest"],
)
def test_shadow_updates_are_checked_before_they_are_filed(tmp_path, decls, monkeypatch, labels, width, says):
    spawn = LaneProcess._spawn

    def hostile(self: LaneProcess, command: list[str], fds: tuple[int, int], log_fd: int):  # noqa: ANN202
        code = SHADOW_FAKE.replace("LABELS", repr(labels)).replace("WIDTH", str(width or kit.dim()))
        return spawn(self, [command[0], "-c", code, *command[3:]], fds, log_fd)

    monkeypatch.setattr(LaneProcess, "_spawn", hostile)
    pool = make_pool(tmp_path, decls, ("knn",))
    try:
        feed(pool, rounds=(1,))
        assert pool.drain(60)
    finally:
        pool.close()
    s = pool.stats
    x, filed, _ = UpdateStore(tmp_path / "store" / "r").read_shadow()
    assert s.rounds_analysed == 1 and s.analysed == 3
    if says is None:
        assert not s.errors and list(filed) == labels and x.shape == (3, kit.dim())
    else:
        assert s.errors == [f"the shadow training's outputs refused: {says}"] and len(filed) == 0


@pytest.mark.slow
def test_an_interim_fit_waits_for_the_shadow_updates_of_the_rounds_before_it(tmp_path, decls, monkeypatch):
    """The shadow lane answers a round seconds after the round's anonymous updates are filed (its training): an interim
    fit asked for then sees that round's shadow updates. A measured suite run's interim re-identification fits ran
    before them, on none, and failed."""
    spawn = LaneProcess._spawn
    users = sorted(kit.knowledge()[0].prior)

    def slow_shadow(self: LaneProcess, command: list[str], fds: tuple[int, int], log_fd: int):  # noqa: ANN202
        if self.spec.kind != "shadow":
            return spawn(self, command, fds, log_fd)
        code = SHADOW_FAKE.replace("LABELS", repr(users)).replace("WIDTH", str(kit.dim()))
        code = code.replace("    labels, width =", "    import time; time.sleep(3)\n    labels, width =")
        return spawn(self, [command[0], "-c", code, *command[3:]], fds, log_fd)

    monkeypatch.setattr(LaneProcess, "_spawn", slow_shadow)
    fits: list[bool] = []
    pool = make_pool(tmp_path, decls, ("knn",), on_fit=lambda name, partial: fits.append(partial))
    try:
        feed(pool, rounds=(1,))
        pool.score(["knn"])
        assert pool.drain(120)
    finally:
        pool.close()
    s = pool.stats
    assert not s.errors and fits == [True] and s.partial_fits == 1, s.errors
    assert outputs(tmp_path, "knn")["scores"].shape == (3, len(users))


# --------------------------------------------------------------------------------------------------------------------
# the same through a remote attack worker


@pytest.mark.slow
def test_a_pool_of_a_remote_attack_worker_works_the_same(tmp_path, decls, run):
    """``leakbed attack-worker`` on a Unix socket, over the pool's store root (read-only to its lanes): the same
    inputs give the same shadow updates and the same kNN outputs as the local pool's run above."""
    sock_dir = Path(tempfile.mkdtemp(prefix="lkw-", dir="/tmp"))  # a socket path must fit 107 bytes
    sock = sock_dir / "w.sock"
    (tmp_path / "store").mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-m", "leakbed.cli", "attack-worker", "--socket", str(sock), "--store", str(tmp_path / "store"),
         "--sandbox", "on", "--log-dir", str(tmp_path / "worker-logs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        pool = make_pool(tmp_path, decls, ("knn",), addresses=[f"unix:{sock}"], sandbox=None)
        try:
            assert not pool.local and pool.sandboxed and not pool.tls
            feed(pool)
            assert pool.drain(300)
            pool.fit(["knn"], timeout=300)
        finally:
            pool.close()
    finally:
        worker.terminate()
        said, _ = worker.communicate(timeout=30)
    s = pool.stats
    assert (s.tapped, s.analysed, s.rounds_analysed) == (6, 6, 2) and s.fitted("knn") and not s.errors, s.errors
    assert worker.returncode == 0 and "Unix socket, sandboxed lanes" in said, said
    local, remote = UpdateStore(run["root"] / "store" / "r").read_shadow(), UpdateStore(tmp_path / "store" / "r").read_shadow()
    np.testing.assert_array_equal(local[0], remote[0])
    for key, value in outputs(run["root"], "knn").items():
        np.testing.assert_array_equal(outputs(tmp_path, "knn")[key], value)
    assert given(tmp_path, "knn") == given(run["root"], "knn")
    logs = sorted(p.name for p in (tmp_path / "worker-logs").iterdir())
    assert logs == ["r-knn.log", "r-shadow.training.log"]  # the lanes ran on the worker's host, in its sandboxes
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_an_unreachable_remote_worker_fails_the_task_after_its_retry_window(tmp_path, decls):
    """Nothing listens at the worker's address: each lane start waits ``retry_seconds`` for it, the task fails with the
    reason, the updates (filed by the pool itself) are all there, and the pool closes at once."""
    from leakbed.core.processes import free_port

    address = f"127.0.0.1:{free_port()}"
    pool = make_pool(tmp_path, decls, ("knn",), addresses=[address], sandbox=None, shadow=False, retry_seconds=1.0)
    try:
        feed(pool)
        assert pool.drain(30)
        t0 = time.monotonic()
        pool.fit(["knn"], timeout=60)
        took = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        pool.close()
        closing = time.monotonic() - t1
    s = pool.stats
    assert not s.fitted("knn") and 2.0 <= took < 10 and closing < 5, (took, closing)
    assert s.errors[-1] == f"fit task killed a second lane of attack 'knn': remote attack worker {address}: not reachable " \
                           "within 1 s", s.errors
    assert (s.tapped, s.analysed, s.failed) == (6, 6, 0)


@pytest.mark.long
def test_a_remote_worker_that_comes_up_within_the_retry_window_is_used(tmp_path, decls):
    """A worker restarting (not listening yet) when the fit starts: the lane waits for it and runs there."""
    from tests.workers.test_remote import serve

    sock_dir = Path(tempfile.mkdtemp(prefix="lkw-", dir="/tmp"))
    address = f"unix:{sock_dir}/w.sock"
    (tmp_path / "store").mkdir()
    pool = make_pool(tmp_path, decls, ("knn",), addresses=[address], sandbox=None, shadow=False, retry_seconds=60.0)
    prefill_shadow(pool)
    started: list = []
    later = threading.Timer(2.0, lambda: started.append(serve(address, tmp_path / "store", tmp_path / "worker")))
    try:
        feed(pool)
        assert pool.drain(30)
        later.start()
        pool.fit(["knn"], timeout=120)
    finally:
        later.cancel()
        pool.close()
        for server, gateway, _ in started:
            gateway.close()
            server.stop(0)
        shutil.rmtree(sock_dir, ignore_errors=True)
    s = pool.stats
    assert started and s.fitted("knn") and not s.errors and s.worker_restarts == 0, s.errors
    assert (tmp_path / "worker" / "logs" / "r-knn.log").is_file()
