"""Several shadow lanes per prior (``AttackPool(shadow_lanes=n)``): lane k trains share k of every round's known users
(or, ``shadow_shares=False``, each round goes whole to the least busy lane), the pool files a round once every share
is in (in the knowledge's order, as a lone lane files it) or not at all, the attacks' per-round hooks follow the
rounds in the order they were filed, and ``on_progress`` tells where the attack side stands (lag, rounds analysed,
fits running and finished).

The plumbing is shown on stand-in lanes (objects in the lanes' place, answering as a lane answers: no process, no
sandbox), so it is fast and its timing is the test's to choose; the same updates from real sandboxed lanes is a slow
test (the shares themselves: ``tests/attacks/test_shadow_shares.py``)."""

from __future__ import annotations

import io
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from leakbed.attacks.shadow import share_of
from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore
from leakbed.workers import AttackPool
from leakbed.workers.hosts import LocalHost
from leakbed.workers.lane import LaneSpec
from leakbed.workers.pool import SHADOW
from leakbed.workers.sandbox import Limits, available
from tests.workers import kit

HOOKED = Declaration(name="hooked", scoring=Scoring(kind="reid"), on_round=True, distribution="leakbed")
FITTED = Declaration(name="fitted", family="reid", scoring=Scoring(kind="reid"), distribution="leakbed")


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def expected(rnd: int) -> np.ndarray:
    """The shadow updates the stand-ins make for round ``rnd``, in the knowledge's order: values that name the round and
    the user (so the store shows which update was filed where)."""
    knowledge, _, _ = kit.knowledge()
    users = np.arange(len(knowledge.prior), dtype=np.float32)[:, None]
    return np.full((len(users), kit.dim()), float(rnd), np.float32) + users


def share_reply(rnd: int, share: tuple[int, int]) -> bytes:
    """A share of a round's shadow updates as a shadow lane hands it back: its users (``share_of``), in order."""
    knowledge, _, _ = kit.knowledge()
    mine = share_of(knowledge, share)
    users = list(knowledge.prior)
    return npz(labels=np.asarray([users[i] for i in mine]), vectors=expected(rnd)[mine])


class Stand:
    """What the stand-in lanes do, and what they saw: a shadow task waits for ``gates[(round, share)]`` (when set);
    ``hooks`` are the rounds the per-round hook saw, in order; ``served`` which lane served which (round, share)."""

    def __init__(self) -> None:
        self.gates: dict[tuple[int, int], threading.Event] = {}
        self.hooks: list[int] = []
        self.served: dict[tuple[int, int], str] = {}
        self.fit_gate = threading.Event()
        self.fit_gate.set()
        self.lock = threading.Lock()

    def reply(self, spec: LaneSpec, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        rnd = int(request["round"])
        if request["op"] == "round" and spec.kind == "shadow":
            share = (int(request["share"][0]), int(request["share"][1])) if "share" in request else (0, 1)
            with self.lock:
                self.served[(rnd, share[0])] = spec.key
            gate = self.gates.get((rnd, share[0]))
            if gate is not None:
                assert gate.wait(30)
            return {"ok": True, "seconds": 0.01}, share_reply(rnd, share)
        if request["op"] == "round":
            with self.lock:
                self.hooks.append(rnd)
            return {"ok": True, "seconds": 0.0}, b""
        assert self.fit_gate.wait(30)
        knowledge, _, _ = kit.knowledge()
        classes = np.asarray(sorted(knowledge.prior))
        return {"ok": True, "seconds": 0.01}, npz(classes=classes, scores=np.zeros((0, len(classes)), np.float32))


class StandInLane:
    start_seconds = 0.0
    pid = 0

    def __init__(self, spec: LaneSpec, stand: Stand) -> None:
        self.spec = spec
        self.stand = stand

    def start(self) -> None:
        pass

    def call(self, request: dict[str, Any], deadline: float) -> tuple[dict[str, Any], bytes]:
        return self.stand.reply(self.spec, request)

    def upstream(self, name: str, data: bytes) -> None:
        pass

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass

    def death(self) -> str:
        return "a stand-in"


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> Stand:
    stand = Stand()
    monkeypatch.setattr(LocalHost, "lane", lambda self, spec, store: StandInLane(spec, stand))
    return stand


def stand_in_pool(root: Path, shadow_lanes: int, **kw: Any) -> AttackPool:
    knowledge, _, _ = kit.knowledge()
    decls = {"hooked": HOOKED, "fitted": FITTED}
    return AttackPool(knowledge, root / "store", declarations=decls, params={"hooked": {}, "fitted": {}},
                      outputs=root / "outputs", count=4, run_id="r", sandbox=None, log_dir=root / "logs",
                      shadow_lanes=shadow_lanes, **kw)


def wait_for(condition, timeout: float = 30.0) -> None:  # noqa: ANN001
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.01)


def test_every_round_is_shared_by_the_lanes_and_filed_once_in_the_knowledge_order(tmp_path, stand):
    pool = stand_in_pool(tmp_path, shadow_lanes=3)
    try:
        for rnd in (1, 2, 3):
            pool.submit_round(kit.snapshot(rnd))
        assert pool.drain(30)
    finally:
        pool.close()
    lanes = ["r/" + SHADOW, f"r/{SHADOW}.2", f"r/{SHADOW}.3"]
    assert stand.served == {(r, k): lanes[k] for r in (1, 2, 3) for k in range(3)}  # lane k: share k of every round
    s = pool.stats
    assert (s.shadow_lanes, s.shadow_split, s.rounds_analysed) == (3, "shares", 3) and not s.errors, s.errors
    assert all(s.tasks_by_worker[k] == 3 for k in lanes) and stand.hooks == [1, 2, 3]
    knowledge, _, _ = kit.knowledge()
    store = UpdateStore(tmp_path / "store" / "r")
    for rnd in (1, 2, 3):  # each round's own updates, filed once, every known user in the knowledge's order
        with np.load(store.root / "shadow" / f"r{rnd:06d}.npz") as z:
            assert list(map(str, z["labels"])) == list(knowledge.prior) and np.array_equal(z["vectors"], expected(rnd))


def test_a_round_and_its_hooks_wait_for_every_share(tmp_path, stand):
    """Share 1 of round 1 is held: round 1 is not filed and no hook runs, though share 0 of rounds 1 and 2 are in."""
    stand.gates[(1, 1)] = threading.Event()
    pool = stand_in_pool(tmp_path, shadow_lanes=2)
    store = UpdateStore(tmp_path / "store" / "r")
    try:
        for rnd in (1, 2):
            pool.submit_round(kit.snapshot(rnd))
        wait_for(lambda: (2, 0) in stand.served)
        time.sleep(0.2)
        assert store.shadow_rounds() == [] and stand.hooks == [] and pool.progress()["lag"] == 2
        stand.gates[(1, 1)].set()
        assert pool.drain(30)
    finally:
        pool.close()
    assert store.shadow_rounds() == [1, 2] and stand.hooks == [1, 2] and pool.stats.max_lag_rounds == 1


def test_whole_rounds_go_to_the_least_busy_lane_and_hooks_follow_the_filing_order(tmp_path, stand):
    """Without shares (a model whose updates a share would change in their last bits): rounds 1 and 2 are held in
    their lanes while round 3 goes whole to the idle third lane and finishes first, then round 2: the per-round hook
    still sees 1, 2, 3, and only once round 1's updates are filed."""
    stand.gates[(1, 0)], stand.gates[(2, 0)] = threading.Event(), threading.Event()
    pool = stand_in_pool(tmp_path, shadow_lanes=3, shadow_shares=False)
    store = UpdateStore(tmp_path / "store" / "r")
    try:
        for rnd in (1, 2, 3):
            pool.submit_round(kit.snapshot(rnd))
        wait_for(lambda: store.shadow_rounds() == [3])
        stand.gates[(2, 0)].set()
        wait_for(lambda: store.shadow_rounds() == [2, 3])
        time.sleep(0.2)
        assert stand.hooks == [] and pool.stats.rounds_analysed == 0  # 2 and 3 wait for round 1
        stand.gates[(1, 0)].set()
        assert pool.drain(30)
        pool.submit_round(kit.snapshot(4))
        assert pool.drain(30)
    finally:
        pool.close()
    assert stand.hooks == [1, 2, 3, 4]
    lanes = ["r/" + SHADOW, f"r/{SHADOW}.2", f"r/{SHADOW}.3"]
    assert [stand.served[(r, 0)] for r in (1, 2, 3)] == lanes and stand.served[(4, 0)] == lanes[0]  # all idle: the first
    s = pool.stats
    assert (s.shadow_lanes, s.shadow_split, s.rounds_analysed, s.max_lag_rounds) == (3, "rounds", 4, 2) and not s.errors
    for rnd in (1, 2, 3, 4):
        with np.load(store.root / "shadow" / f"r{rnd:06d}.npz") as z:
            assert np.array_equal(z["vectors"], expected(rnd))


def test_a_failed_share_leaves_its_round_without_shadow_updates(tmp_path, stand):
    """Share 1 of round 1 names someone the attacker does not know: refused, so round 1 has no shadow updates (as when
    a lone lane failed); the hooks still see round 1, then round 2; one error."""
    reply = stand.reply

    def stray(spec: LaneSpec, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        if request["op"] == "round" and spec.kind == "shadow" and request["round"] == 1 and request["share"][0] == 1:
            return {"ok": True, "seconds": 0.0}, npz(labels=np.asarray(["nobody"]), vectors=np.zeros((1, kit.dim()), np.float32))
        return reply(spec, request)

    stand.reply = stray  # type: ignore[method-assign]
    pool = stand_in_pool(tmp_path, shadow_lanes=2)
    try:
        pool.submit_round(kit.snapshot(1))
        pool.submit_round(kit.snapshot(2))
        assert pool.drain(30)
    finally:
        pool.close()
    assert stand.hooks == [1, 2] and UpdateStore(tmp_path / "store" / "r").shadow_rounds() == [2]
    assert len(pool.stats.errors) == 1 and "identities the attacker does not know" in pool.stats.errors[0], pool.stats.errors
    assert pool.stats.rounds_analysed == 2


def test_progress_tells_the_lag_the_rounds_analysed_and_the_fits(tmp_path, stand):
    seen: list[dict[str, int]] = []
    stand.gates[(1, 0)] = threading.Event()
    pool = stand_in_pool(tmp_path, shadow_lanes=1, on_progress=seen.append)
    try:
        for rnd in (1, 2, 3):
            pool.submit_round(kit.snapshot(rnd))
        wait_for(lambda: bool(seen) and seen[-1]["rounds"] == 3)
        assert seen[-1] == {"rounds": 3, "analysed": 0, "lag": 3, "fits": 0, "fitted": 0, "fitting": 0}
        stand.gates[(1, 0)].set()
        assert pool.drain(30)
        assert seen[-1] == {"rounds": 3, "analysed": 3, "lag": 0, "fits": 0, "fitted": 0, "fitting": 0}
        assert [p["lag"] for p in seen if p["rounds"] == 3] == [3, 2, 1, 0]  # one round analysed at a time
        stand.fit_gate.clear()
        fitting = threading.Thread(target=pool.fit, args=(["fitted"],), kwargs={"timeout": 30})
        fitting.start()
        wait_for(lambda: seen[-1]["fitting"] == 1)
        assert seen[-1] == {"rounds": 3, "analysed": 3, "lag": 0, "fits": 1, "fitted": 0, "fitting": 1}
        stand.fit_gate.set()
        fitting.join(30)
    finally:
        pool.close()
    assert pool.stats.fitted("fitted") and pool.stats.fits_running == 0
    assert seen[-1] == {"rounds": 3, "analysed": 3, "lag": 0, "fits": 1, "fitted": 1, "fitting": 0}
    assert pool.stats.max_lag_rounds == 2  # round 1 was analysed once round 3 had come


def test_a_progress_display_that_fails_stops_nothing(tmp_path, stand):
    def broken(_: dict[str, int]) -> None:
        raise RuntimeError("the display broke")

    pool = stand_in_pool(tmp_path, shadow_lanes=2, on_progress=broken)
    try:
        pool.submit_round(kit.snapshot(1))
        assert pool.drain(30)
    finally:
        pool.close()
    assert pool.stats.rounds_analysed == 1 and UpdateStore(tmp_path / "store" / "r").shadow_rounds() == [1]


def test_never_more_shadow_lanes_than_known_users(tmp_path, stand):
    knowledge, _, _ = kit.knowledge()
    pool = stand_in_pool(tmp_path, shadow_lanes=64)
    pool.close()
    assert pool.stats.shadow_lanes == len(knowledge.prior) < 64


@pytest.mark.slow
@pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")
def test_three_sandboxed_shadow_lanes_file_the_updates_of_one(tmp_path):
    """Leakbed's own shadow training (the one-user loop) in 1 and in 3 sandboxed lanes, over three rounds of different
    global models: the store holds the same shadow updates, bit for bit."""
    knowledge, arrays, _ = kit.knowledge()
    knowledge = replace(knowledge, shadow_batch_users=0)
    rng = np.random.default_rng(5)
    rounds = {r: {k: (v + rng.normal(scale=0.05, size=v.shape)).astype(v.dtype) for k, v in arrays.items()}
              for r in (1, 2, 3)}
    stores = {}
    for lanes in (1, 3):
        root = tmp_path / f"lanes-{lanes}"
        pool = AttackPool(knowledge, root / "store", declarations={}, params={}, outputs=root / "outputs", count=3,
                          run_id="r", sandbox=Limits(), log_dir=root / "logs", shadow_lanes=lanes)
        try:
            for r, global_model in rounds.items():
                pool.submit_round(RoundSnapshot(r, global_model, kit.TRAIN))
            assert pool.drain(600)
        finally:
            pool.close()
        assert pool.stats.rounds_analysed == 3 and not pool.stats.errors, pool.stats.errors
        assert {k: v for k, v in pool.stats.tasks_by_worker.items() if SHADOW in k} == {
            "r/" + SHADOW if i == 0 else f"r/{SHADOW}.{i + 1}": 3 for i in range(lanes)}
        stores[lanes] = UpdateStore(root / "store" / "r")
    for r in rounds:
        one, three = (np.load(stores[n].root / "shadow" / f"r{r:06d}.npz") for n in (1, 3))
        with one, three:
            assert np.array_equal(one["labels"], three["labels"]) and np.array_equal(one["vectors"], three["vectors"])
            assert list(map(str, one["labels"])) == list(knowledge.prior)
    with np.load(stores[1].root / "shadow" / "r000001.npz") as a, np.load(stores[1].root / "shadow" / "r000002.npz") as b:
        assert not np.array_equal(a["vectors"], b["vectors"])
