from dataclasses import replace

import numpy as np
import torch

from attacks import AnonymousUpdate, AttackerKnowledge, AttackPool, RoundSnapshot
from leakbed.data import federation
from leakbed.models import attack_keys, build_model
from leakbed.store import UpdateStore
from leakbed.training import state_arrays
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
    pool = AttackPool(knowledge, str(tmp_path), workers=2, queue_size=8, submit_timeout=30)
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
    store = UpdateStore(tmp_path)
    x, labels, rounds = store.read_shadow()
    assert x.shape == (12, dim) and sorted(set(labels)) == sorted(knowledge.prior) and sorted(set(rounds)) == [1, 2]
    pred = store.read_predictions("knn")
    assert pred["scores"].shape == (6, 6) and sorted(pred["classes"]) == sorted(knowledge.prior)


def test_a_failing_task_is_counted_not_lost(tmp_path):
    knowledge, arrays, keys = _knowledge()
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=4, submit_timeout=30)
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
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=1, submit_timeout=0.01)
    try:
        for rnd in range(1, 6):
            pool.submit_round(RoundSnapshot(rnd, arrays, TRAIN))
            pool.submit_updates(_anon(rnd, 2, 7, np.random.default_rng(rnd)))
        pool.drain(120)
    finally:
        pool.close()
    s = pool.stats
    assert s.tapped == 10 and s.analysed + s.dropped + s.failed == s.tapped and s.dropped > 0


def test_dead_workers_are_reported(tmp_path):
    knowledge, arrays, keys = _knowledge()
    pool = AttackPool(knowledge, str(tmp_path), workers=1, queue_size=4, submit_timeout=5)
    try:
        for p in pool._procs:
            p.kill()
            p.join()
        pool.submit_updates(_anon(1, 2, 7, np.random.default_rng(1)))
        assert pool.drain(10) is False or pool.stats.analysed == 0
        pool.fit(["knn"], timeout=10)
    finally:
        pool.close()
    assert pool.stats.analysed == 0 and any("exited" in e for e in pool.stats.errors)
