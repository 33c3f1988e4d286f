import os
import sys
import time
from dataclasses import replace

import numpy as np
import torch

from attacks import AnonymousUpdate, AttackerKnowledge, AttackPool, RoundSnapshot
from core.data import federation
from core.models import attack_keys, build_model
from core.processes import free_port
from core.store import UpdateStore
from core.training import state_arrays
from tests.conftest import tiny_config

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
    pred = store.read_predictions("knn")
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
        partial = UpdateStore(tmp_path / "r").read_predictions("knn")
        pool.submit_round(RoundSnapshot(2, arrays, TRAIN))
        pool.submit_updates(_anon(2, 3, dim, np.random.default_rng(1)))
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    assert seen == [("knn", True), ("knn", False)] and pool.stats.partial_fits == 1
    assert len(partial["ids"]) == 3 and len(UpdateStore(tmp_path / "r").read_predictions("knn")["ids"]) == 6


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
        preds.append({n: store.read_predictions(n) for n in ("mlp", "knn")} | {"shadow": store.read_shadow()[0]})
    np.testing.assert_array_equal(preds[0]["shadow"], preds[1]["shadow"])
    for name in ("mlp", "knn"):
        for key in ("ids", "classes", "scores"):
            np.testing.assert_array_equal(preds[0][name][key], preds[1][name][key])


def test_a_worker_dead_of_a_signal_in_the_jail_says_which(tmp_path):
    """In the jail, a worker killed by SIGKILL (the OOM killer's signal) ends as unshare's exit code 1 and
    the line "sigprocmask unblock failed", which names no cause, and a segfault as unshare's own death:
    the pool's restart error says which, from the worker's log (its faulthandler names fatal signals)."""
    import signal
    import subprocess

    import pytest

    from attacks import jail
    from attacks.pool import _LocalWorker
    from core.processes import descendants

    if why := jail.available():
        pytest.skip(f"no jail here: {why}")
    worker = object.__new__(_LocalWorker)
    worker.jail = True
    codes = {}
    for name, code in {"sigkill": "import time; time.sleep(60)", "segfault": "import ctypes; ctypes.string_at(0)"}.items():
        worker.log_path = tmp_path / f"{name}.log"
        with worker.log_path.open("wb") as out:
            argv = [*jail._unshare_argv(), sys.executable, "-X", "faulthandler", "-c", code]
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            if name == "sigkill":
                deadline = time.monotonic() + 30
                while not (kids := descendants(proc.pid)) and time.monotonic() < deadline:
                    time.sleep(0.1)
                os.kill(max(kids), signal.SIGKILL)
            codes[name] = (proc.wait(timeout=60), worker.last_words())
    (killed, killed_words), (segv, segv_words) = codes["sigkill"], codes["segfault"]
    assert killed == 1 and killed_words.endswith("cannot catch, SIGKILL (the OOM killer, or a kill)"), codes
    assert segv == -signal.SIGSEGV and segv_words.startswith("Fatal Python error: Segmentation fault"), codes
