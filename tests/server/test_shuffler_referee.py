import hashlib
import itertools
import json
import pickle

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from leakbed.core.config import build_config
from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.store import UpdateStore
from leakbed.referee.context import ScoreContext
from leakbed.referee.scorers import score_one
from leakbed.referee.seal import Sealer, TruthExists
from leakbed.referee.truth import Referee
from leakbed.server.shuffler import TRUTH_KEY, Shuffler
from tests.conftest import arrays_of, fake_message

GLOBAL = {"fc.weight": np.zeros((3, 2), np.float32), "fc.bias": np.zeros(3, np.float32)}


def reply(user: str, node: int, value: float, n: int = 10):
    rec = arrays_of({k: v + value for k, v in GLOBAL.items()})
    return fake_message(
        RecordDict(
            {
                "arrays": rec,
                "metrics": MetricRecord({"num-examples": n}),
                TRUTH_KEY: ConfigRecord({"user-id": user}),
            }
        ),
        src=node,
    )


def test_shuffler_strips_identity_and_seals_truth(tmp_path):
    nodes = [0x1F2E3D4C5B6A7988, 0x7A6B5C4D3E2F1021, 0x2B3C4D5E6F708192]  # 64-bit, as Flower's node ids
    msgs = [reply("alice", nodes[0], 1.0), reply("bob", nodes[1], -2.0), reply("carol", nodes[2], 0.5)]
    anon = Shuffler(Sealer(tmp_path / "referee"), ["fc.weight"]).process(4, GLOBAL, msgs)
    assert len(anon) == 3 and all(TRUTH_KEY not in m.content.config_records for m in msgs)
    blob = pickle.dumps(anon)
    for secret in (b"alice", b"bob", b"carol"):
        assert secret not in blob
    for node in nodes:  # neither pickled as an int (8 bytes, little-endian) nor as text
        assert node.to_bytes(8, "little") not in blob and str(node).encode() not in blob
    assert {a.round for a in anon} == {4}
    assert all(len(a.update_id) == 16 and int(a.update_id, 16) >= 0 for a in anon)
    assert all(np.isclose(np.linalg.norm(a.vector), 1.0) for a in anon)
    truth = [json.loads(line) for line in (tmp_path / "referee" / "truth.jsonl").read_text().splitlines()]
    assert sorted(t["user_id"] for t in truth) == ["alice", "bob", "carol"]
    referee = Referee.load(tmp_path / "referee")
    assert sorted(referee.truth_for(np.array([a.update_id for a in anon]))) == ["alice", "bob", "carol"]


def _distinct_reply(i: int):
    """User ``u<i>``'s reply: a Δw of its own direction (not just a scaled copy of the others')."""
    rng = np.random.default_rng(i)
    msg = reply(f"u{i}", 100 + i, 0.0, n=i + 1)
    msg.content["arrays"] = arrays_of({k: v + rng.normal(size=v.shape).astype(np.float32) for k, v in GLOBAL.items()})
    return msg


def test_shuffling_hides_arrival_order(tmp_path):
    """The release order is a function of the updates' content alone: every arrival order (and
    every run) gives the same one, sorted by a hash of the Δw the attack side receives anyway."""
    orders = set()
    arrivals = list(itertools.permutations(range(6)))[::97]  # 8 arrival orders, identity first
    for j, arrival in enumerate(arrivals):
        anon = Shuffler(Sealer(tmp_path / f"r{j}"), ["fc.weight"]).process(1, GLOBAL, [_distinct_reply(i) for i in arrival])
        digests = [hashlib.sha256(np.ascontiguousarray(a.vector).tobytes()).hexdigest() for a in anon]
        assert digests == sorted(digests) and len(set(digests)) == 6
        orders.add(tuple(a.num_examples for a in anon))
    assert len(orders) == 1 and len(set(arrivals)) == len(arrivals) > 1
    assert orders != {tuple(range(1, 7))}  # not simply the (first) arrival order either

    # Not recoverable: over 240 random arrival orders, an attacker who learns each release position's
    # most frequent arrival position (the best guess from release order) is right at chance, 1/6 (measured
    # 0.20), and arrival and release positions are uncorrelated (measured Spearman rho 0.08); a release in
    # arrival order would give 1.0 and 1.0.
    rng = np.random.default_rng(7)
    pairs = []  # (arrival position, release position) of every update in every trial
    for trial in range(240):
        arrival = [int(i) for i in rng.permutation(6)]
        anon = Shuffler(Sealer(tmp_path / f"t{trial}"), ["fc.weight"]).process(1, GLOBAL, [_distinct_reply(i) for i in arrival])
        released = [a.num_examples - 1 for a in anon]  # user i sends i + 1 examples
        pairs += [(arrival.index(u), pos) for pos, u in enumerate(released)]
    pairs_arr = np.asarray(pairs)
    counts = np.zeros((6, 6))
    np.add.at(counts, (pairs_arr[:, 1], pairs_arr[:, 0]), 1)
    best_guess_accuracy = counts.max(axis=1).sum() / len(pairs)
    rho = np.corrcoef(pairs_arr[:, 0], pairs_arr[:, 1])[0, 1]  # positions are ranks already: Pearson = Spearman
    assert best_guess_accuracy < 0.3, best_guess_accuracy
    assert abs(rho) < 0.2, rho


def test_update_ids_are_opaque_and_differ_between_runs(tmp_path):
    """Ids come from a random per-run key: two runs of the same replies get disjoint ids, and no
    seeded generator (the old ``default_rng([seed, 0x5A])``) regenerates them."""
    ids = []
    for run in ("a", "b"):
        msgs = [reply(f"u{i}", 100 + i, float(i + 1)) for i in range(6)]
        ids.append([a.update_id for a in Shuffler(Sealer(tmp_path / run), ["fc.weight"]).process(1, GLOBAL, msgs)])
    assert all(len(set(run)) == 6 for run in ids) and not set(ids[0]) & set(ids[1])
    for seed in range(16):
        rng = np.random.default_rng([seed, 0x5A])
        guessed = {rng.bytes(8).hex() for _ in range(6)}
        assert not guessed & (set(ids[0]) | set(ids[1]))


def test_a_sealer_refuses_a_folder_that_already_holds_truth(tmp_path):
    sealer = Sealer(tmp_path / "ref")
    sealer.seal(sealer.new_update_id(), "alice", 1)
    with pytest.raises(TruthExists):
        Sealer(tmp_path / "ref")
    assert [r["user_id"] for r in Referee.load(tmp_path / "ref").records()] == ["alice"]  # the old truth is intact


def test_referee_scores_predictions(tmp_path):
    sealer = Sealer(tmp_path / "ref")
    for i, user in enumerate(["a", "b", "a", "c"]):
        sealer.seal(f"id{i}", user, rnd=1 + i // 2)
    referee = Referee.load(tmp_path / "ref")
    store = UpdateStore(tmp_path / "store")
    classes = np.array(["a", "b", "c"])
    scores = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.0, 0.1, 0.9]])
    ids, rounds = np.array(["id0", "id1", "id2", "id3"]), np.array([1, 1, 2, 2])
    for rnd in (1, 2):  # the updates as the pool filed them (the store's rounds are the ones scored)
        sel = rounds == rnd
        store.write_anon(rnd, "b0", list(ids[sel]), np.zeros((int(sel.sum()), 2), np.float32), np.full(int(sel.sum()), 10))
    outputs = tmp_path / "outputs"  # the pool's filing: the outputs and the ids the fit was given
    outputs.mkdir()
    np.savez(outputs / "mlp.npz", ids=ids, rounds=rounds, classes=classes, scores=scores)
    np.save(outputs / "mlp.given.npy", ids)
    cfg = build_config({})
    reid = Scoring(kind="reid")
    mlp = Declaration(name="mlp", family="reid", scoring=reid)
    ctx = ScoreContext("mlp", "mlp", {}, mlp.scoring, referee, store, cfg, "random", tmp_path, outputs, {"ab": {"a", "b"}})
    m = score_one(mlp, ctx)  # kind reid: referee.score_reid, the re-identification family's
    assert m["top1"] == 0.75 and set(m["per_round"]) == {1, 2} and m["per_round"][1]["top1"] == 1.0
    assert m["coverage"] == 1.0 and m["n_updates"] == 4
    assert m["groups"]["ab"]["n_updates"] == 3 and m["groups"]["ab"]["top1"] == 2 / 3
