"""Shuffler batching: releases only batches of at least k, across rounds, loses none (held =
released + withheld), and the attacker's Δw is taken against the release round's global model."""

import json

import numpy as np
import pytest

from leakbed.core.updates import delta_vector
from leakbed.referee.seal import Sealer
from leakbed.server.batching import BatchRelease, HeldUpdate
from leakbed.server.shuffler import Shuffler
from tests.conftest import arrays_of
from tests.server.test_shuffler_referee import GLOBAL, reply


def _held(rnd: int, n: int) -> list[HeldUpdate]:
    return [HeldUpdate(f"{rnd}-{i}", rnd, {}, 1) for i in range(n)]


@pytest.mark.parametrize("k", [0, 1, 5, 7, 12])
def test_batches_are_at_least_k_and_none_is_lost(k):
    rng = np.random.default_rng(k)
    release = BatchRelease(k)
    out = []
    for rnd in range(1, 11):
        batch = release.offer(rnd, _held(rnd, int(rng.integers(0, 5))))
        assert not batch or len(batch) >= max(k, 1)
        out += batch
    s = release.stats
    assert s.held == s.released + s.withheld and s.released == len(out) == sum(s.batches)
    assert 0 <= s.withheld < max(k, 1)
    assert len({u.update_id for u in out}) == len(out)
    if k <= 1:
        assert s.withheld == 0 and s.max_delay_rounds == 0  # every round as it comes


def test_a_batch_spans_rounds_and_reports_its_delay():
    release = BatchRelease(6)
    assert release.offer(1, _held(1, 4)) == []
    batch = release.offer(2, _held(2, 4))
    assert len(batch) == 8 and {u.round for u in batch} == {1, 2}
    assert release.stats.release_rounds == [2] and release.stats.max_delay_rounds == 1


def test_the_shuffler_releases_batches_against_the_release_rounds_model(tmp_path):
    shuffler = Shuffler(Sealer(tmp_path / "referee"), ["fc.weight"], batch_min=4)
    g1 = GLOBAL
    g2 = {k: v + np.linspace(-0.5, 0.5, v.size).reshape(v.shape) for k, v in GLOBAL.items()}  # next round's model
    assert shuffler.process(1, g1, [reply("alice", 1, 1.0), reply("bob", 2, -2.0), reply("carol", 3, 0.5)]) == []
    anon = shuffler.process(2, g2, [reply("alice", 1, 0.7), reply("dave", 4, 0.2)])
    assert len(anon) == 5 and {a.round for a in anon} == {2}  # the attacker sees only the release round
    truth = {t["update_id"]: t for t in map(json.loads, (tmp_path / "referee" / "truth.jsonl").read_text().splitlines())}
    assert len(truth) == 5 and sorted(t["round"] for t in truth.values()) == [1, 1, 1, 2, 2]  # sealed with its true round
    for a in anon:  # round-1 updates measured from round 2's global: no longer their true Δw
        value = {"alice": [1.0, 0.7], "bob": [-2.0], "carol": [0.5], "dave": [0.2]}[truth[a.update_id]["user_id"]]
        local = {k: v + value[-1 if truth[a.update_id]["round"] == 2 else 0] for k, v in GLOBAL.items()}
        assert np.allclose(a.vector, delta_vector(g2, local, ["fc.weight"]))
        if truth[a.update_id]["round"] == 1:
            assert not np.allclose(a.vector, delta_vector(g1, local, ["fc.weight"]))
    assert shuffler.batching.stats.to_dict()["withheld"] == 0


def test_without_batching_the_shuffler_is_unchanged(tmp_path):
    anon = Shuffler(Sealer(tmp_path / "r"), ["fc.weight"]).process(3, GLOBAL, [reply("alice", 1, 1.0)])
    local = {k: v + 1.0 for k, v in GLOBAL.items()}
    assert len(anon) == 1 and anon[0].round == 3 and np.allclose(anon[0].vector, delta_vector(GLOBAL, local, ["fc.weight"]))


def test_an_adaptive_attacker_finds_each_updates_own_round(tmp_path):
    shuffler = Shuffler(Sealer(tmp_path / "referee"), ["fc.weight"], batch_min=4, reference="nearest")
    g1 = GLOBAL
    g2 = {k: v + np.linspace(-0.5, 0.5, v.size).reshape(v.shape) for k, v in GLOBAL.items()}
    small = np.array([[0.01, -0.02], [0.03, 0.0], [-0.01, 0.02]], np.float32)

    def near(g, user, node):
        msg = reply(user, node, 0.0)
        msg.content["arrays"] = arrays_of({"fc.weight": g["fc.weight"] + small, "fc.bias": g["fc.bias"]})
        return msg

    assert shuffler.process(1, g1, [near(g1, "alice", 1), near(g1, "bob", 2)]) == []
    anon = shuffler.process(2, g2, [near(g2, "carol", 3), near(g2, "dave", 4)])
    expected = delta_vector(g1, {"fc.weight": g1["fc.weight"] + small}, ["fc.weight"])
    assert len(anon) == 4 and all(np.allclose(a.vector, expected) for a in anon)  # every Δw is its true one
    naive = Shuffler(Sealer(tmp_path / "r2"), ["fc.weight"], batch_min=4)
    naive.process(1, g1, [near(g1, "alice", 1), near(g1, "bob", 2)])
    anon = naive.process(2, g2, [near(g2, "carol", 3), near(g2, "dave", 4)])
    assert sum(np.allclose(a.vector, expected) for a in anon) == 2  # round-1 updates measured from the wrong model
