import os
import time
from dataclasses import replace

import numpy as np
import torch

from core.data import federation
from core.knowledge import AttackerKnowledge
from core.models import attack_keys, build_model
from core.processes import free_port
from core.records import AnonymousUpdate, RoundSnapshot
from core.store import UpdateStore
from core.training import state_arrays
from tests.conftest import tiny_config
from workers import AttackPool

TRAIN = {"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0}


def _knowledge():
    cfg = tiny_config()
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, ["final"])
    k = AttackerKnowledge(
        prior=fed.prior(),
        corpus_meta=replace(fed.corpus, users={}),
        model=cfg.model,
        attack=cfg.attack,
        keys=keys,
        seed=0,
        device="cpu",
    )
    return k, state_arrays(model), keys


def _anon(rnd, n, dim, rng):
    return [
        AnonymousUpdate(f"{rnd:02d}{i:014x}", rnd, (v := rng.normal(size=dim).astype(np.float32)) / np.linalg.norm(v), 10)
        for i in range(n)
    ]


def test_pool_analyses_everything_it_is_tapped(tmp_path):
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    rng = np.random.default_rng(0)
    pool = AttackPool(knowledge, str(tmp_path), workers=2, queue_size=8, submit_timeout=30, run_id="r")
    try:
        for rnd in (1, 2):
            pool.submit_round(RoundSnapshot(rnd, arrays, TRAIN))
            pool.submit_updates(_anon(rnd, 3, dim, rng))
        assert pool.drain(120)
        pool.fit(["knn", "svm"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    assert (s.tapped, s.analysed, s.dropped, s.failed) == (6, 6, 0, 0) and s.rounds_analysed == 2 and not s.errors
    store = UpdateStore(tmp_path / "r")
    x, labels, rounds = store.read_shadow()
    assert x.shape == (12, dim) and sorted(set(labels)) == sorted(knowledge.prior) and sorted(set(rounds)) == [1, 2]
    pred = store.read_result("knn")
    assert pred["scores"].shape == (6, 6) and sorted(pred["classes"]) == sorted(knowledge.prior)


def test_a_failing_task_is_counted_not_lost(tmp_path):
    knowledge, arrays, keys = _knowledge()
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=4, submit_timeout=30, run_id="r")
    try:
        broken = {k: v[..., :1] for k, v in arrays.items()}  # wrong shapes: shadow training fails
        pool.submit_round(RoundSnapshot(1, broken, TRAIN))
        pool.submit_updates(_anon(1, 2, 7, np.random.default_rng(1)))
        assert pool.drain(60)
    finally:
        pool.close()
    assert pool.stats.rounds_analysed == 1 and len(pool.stats.errors) == 1 and pool.stats.analysed == 2


def test_a_full_queue_counts_drops(tmp_path):
    knowledge, arrays, keys = _knowledge()
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=1, submit_timeout=0.01, run_id="r")
    try:
        for rnd in range(1, 6):
            pool.submit_round(RoundSnapshot(rnd, arrays, TRAIN))
            pool.submit_updates(_anon(rnd, 2, 7, np.random.default_rng(rnd)))
        pool.drain(120)
    finally:
        pool.close()
    s = pool.stats
    assert s.tapped == 10 and s.analysed + s.dropped + s.failed == s.tapped and s.dropped > 0


def test_a_killed_worker_is_restarted_and_nothing_is_lost(tmp_path):
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=16, submit_timeout=30, retry_seconds=120, run_id="r")
    try:
        pool.submit_updates(_anon(1, 2, dim, np.random.default_rng(1)))
        assert pool.drain(120)
        first = pool.local[0].proc
        first.kill()
        first.wait()
        for rnd in (2, 3):  # tapped while the worker is down: queued, then delivered to its successor
            pool.submit_updates(_anon(rnd, 2, dim, np.random.default_rng(rnd)))
        assert pool.drain(120)
        assert pool.local[0].proc is not first and pool.local[0].proc.poll() is None
    finally:
        pool.close()
    s = pool.stats
    assert s.worker_restarts == 1 and (s.tapped, s.analysed, s.dropped, s.failed) == (6, 6, 0, 0)
    assert len(UpdateStore(tmp_path / "r").read_anon()["ids"]) == 6


def test_several_workers_share_the_load(tmp_path):
    knowledge, arrays, keys = _knowledge()
    pool = AttackPool(knowledge, str(tmp_path), workers=2, queue_size=16, submit_timeout=30, run_id="r")
    try:
        deadline = time.monotonic() + 120
        while not all(pool._healthy) and time.monotonic() < deadline:
            time.sleep(0.2)
        for rnd in range(1, 5):
            pool.submit_round(RoundSnapshot(rnd, arrays, TRAIN))
        assert pool.drain(120)
    finally:
        pool.close()
    assert pool.stats.rounds_analysed == 4 and not pool.stats.errors
    assert sorted(pool.stats.tasks_by_worker) == ["0", "1"], pool.stats.tasks_by_worker


def test_unreachable_workers_fail_tasks_after_the_retry_window(tmp_path):
    knowledge, arrays, keys = _knowledge()
    port = free_port()  # nothing listens there
    pool = AttackPool(
        knowledge,
        str(tmp_path),
        workers=1,
        queue_size=4,
        submit_timeout=5,
        addresses=[f"127.0.0.1:{port}"],
        retry_seconds=1,
        run_id="r",
    )
    try:
        pool.submit_updates(_anon(1, 2, 7, np.random.default_rng(1)))
        assert pool.drain(30)
        pool.fit(["knn"], timeout=30)
    finally:
        pool.close()
    s = pool.stats
    assert (s.analysed, s.failed) == (0, 2) and any("no attack worker reachable" in e for e in s.errors)
    assert s.fit_seconds["knn"] != s.fit_seconds["knn"]  # NaN: not fitted


def test_interim_scores_reach_the_callback(tmp_path):
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    seen = []
    pool = AttackPool(
        knowledge, str(tmp_path), workers=1, queue_size=8, submit_timeout=30, on_fit=lambda n, p: seen.append((n, p)), run_id="r"
    )
    try:
        pool.submit_round(RoundSnapshot(1, arrays, TRAIN))
        pool.submit_updates(_anon(1, 3, dim, np.random.default_rng(0)))
        pool.score(["knn"])
        assert pool.drain(120)
        partial = UpdateStore(tmp_path / "r").read_result("knn")
        pool.submit_round(RoundSnapshot(2, arrays, TRAIN))
        pool.submit_updates(_anon(2, 3, dim, np.random.default_rng(1)))
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    assert seen == [("knn", True), ("knn", False)] and pool.stats.partial_fits == 1
    assert len(partial["ids"]) == 3 and len(UpdateStore(tmp_path / "r").read_result("knn")["ids"]) == 6


def test_results_do_not_depend_on_which_worker_did_what(tmp_path):
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    preds = []
    for workers in (1, 2):
        rng = np.random.default_rng(0)
        pool = AttackPool(knowledge, str(tmp_path / f"w{workers}"), workers=workers, queue_size=8, submit_timeout=30, run_id="r")
        try:
            for rnd in (1, 2):
                pool.submit_round(RoundSnapshot(rnd, arrays, TRAIN))
                pool.submit_updates(_anon(rnd, 3, dim, rng))
            pool.fit(["mlp", "knn"], timeout=300)
        finally:
            pool.close()
        assert not pool.stats.errors
        store = UpdateStore(tmp_path / f"w{workers}" / "r")
        preds.append({n: store.read_result(n) for n in ("mlp", "knn")} | {"shadow": store.read_shadow()[0]})
    np.testing.assert_array_equal(preds[0]["shadow"], preds[1]["shadow"])
    for name in ("mlp", "knn"):
        for key in ("ids", "classes", "scores"):
            np.testing.assert_array_equal(preds[0][name][key], preds[1][name][key])


def _inner_worker(pool: AttackPool, slot: int = 0) -> int:
    """The sandboxed worker's own (python) process: bwrap's descendants."""
    from core.processes import descendants

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in descendants(pool.local[slot].proc.pid):
            try:
                if open(f"/proc/{pid}/comm").read().startswith("python"):
                    return pid
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no sandboxed worker process")


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _kill_when_busy(pool: AttackPool, restarts: int, busy_seconds: float = 1.0) -> None:
    """SIGKILL the worker (the OOM killer's signal), once restarted ``restarts`` times, when it has spent
    ``busy_seconds`` of CPU on a task."""
    import signal

    log = pool.local[0].log_path
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("warmed up") <= restarts):
        time.sleep(0.05)  # serving and warmed up (its imports cost CPU too, a loaded machine stretches them): the task is next
    pid = _inner_worker(pool)
    start = _cpu_seconds(pid)
    deadline = time.monotonic() + 120
    while _cpu_seconds(pid) - start < busy_seconds and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def test_a_task_that_kills_its_sandboxed_worker_twice_fails_with_the_cause_and_the_pool_goes_on(tmp_path):
    """A worker dying in its sandbox mid-task (killed, out of memory) gets the task redelivered once; when the
    next worker dies of it too, the task fails with the cause of death, and later work is analysed as usual."""
    from workers.sandbox import Limits

    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    store_root = str(tmp_path / "store")
    pool = AttackPool(
        knowledge, store_root, workers=1, queue_size=8, submit_timeout=30, run_id="r", sandbox=Limits(), warm=True
    )  # warm: it logs when its imports are done, so the kill lands on the task's CPU, not the imports'
    try:
        assert pool.sandboxed
        pool.submit_round(RoundSnapshot(1, arrays, {**TRAIN, "epochs": 400}))  # long shadow training: seconds of CPU
        _kill_when_busy(pool, restarts=0)
        _kill_when_busy(pool, restarts=1)  # the supervisor restarted it and the round was redelivered to it
        pool.submit_round(RoundSnapshot(2, arrays, TRAIN))
        pool.submit_updates(_anon(2, 3, dim, np.random.default_rng(0)))
        assert pool.drain(180)
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    failed = [e for e in s.errors if "killed a second attack worker" in e]
    assert len(failed) == 1 and "round task" in failed[0] and "SIGKILL: the kernel's OOM killer, or a kill" in failed[0], s.errors
    assert s.worker_restarts == 2 and (s.tapped, s.analysed, s.failed) == (3, 3, 0)
    assert s.fit_seconds["knn"] == s.fit_seconds["knn"]  # not NaN: fitted
    store = UpdateStore(tmp_path / "store" / "r")
    assert len(store.read_result("knn")["ids"]) == 3  # nothing of the store was lost
    assert (tmp_path / "store-logs" / "worker-0.log").is_file() and not (tmp_path / "store" / "workers").exists()


def test_a_task_over_the_sandbox_limits_fails_with_the_reason(tmp_path):
    """One global model larger than the file-size limit: that round's task fails, saying so; the rest goes on."""
    from workers.sandbox import Limits

    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    big = {**arrays, "padding": np.zeros(1 << 19, np.float32)}  # 2 MiB in the round's npz
    pool = AttackPool(
        knowledge, str(tmp_path), workers=1, queue_size=8, submit_timeout=30, run_id="r", sandbox=Limits(file_size_mb=1)
    )
    try:
        pool.submit_round(RoundSnapshot(1, big, TRAIN))
        pool.submit_round(RoundSnapshot(2, arrays, TRAIN))
        pool.submit_updates(_anon(2, 3, dim, np.random.default_rng(0)))
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    assert len(s.errors) == 1 and "File too large" in s.errors[0], s.errors
    assert s.rounds_analysed == 2 and s.analysed == 3 and s.fit_seconds["knn"] == s.fit_seconds["knn"] and not s.worker_restarts


def test_the_pool_exports_its_workers_task_metrics(tmp_path):
    """A sandboxed worker has no network: the pool counts its tasks from the acknowledgements (leakbed_worker_*)."""
    from core import telemetry

    def value(name: str, **labels: str) -> float:
        return telemetry.SERVER_REGISTRY.get_sample_value(name, labels or None) or 0.0

    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    before = (
        value("leakbed_worker_tasks_total", kind="updates", outcome="ok"),
        value("leakbed_worker_tasks_total", kind="fit", outcome="error"),
        value("leakbed_worker_updates_stored_total"),
    )
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=8, submit_timeout=30, run_id="r")
    try:
        pool.submit_round(RoundSnapshot(1, arrays, TRAIN))
        pool.submit_updates(_anon(1, 4, dim, np.random.default_rng(0)))
        pool.fit(["no-such-attack"], timeout=60)
    finally:
        pool.close()
    after = (
        value("leakbed_worker_tasks_total", kind="updates", outcome="ok"),
        value("leakbed_worker_tasks_total", kind="fit", outcome="error"),
        value("leakbed_worker_updates_stored_total"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 4]
