import json
import pickle

import numpy as np
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from leakbed.store import UpdateStore
from server.referee import Referee
from server.shuffler import TRUTH_KEY, Shuffler
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
    referee = Referee(tmp_path / "referee")
    nodes = [0x1F2E3D4C5B6A7988, 0x7A6B5C4D3E2F1021, 0x2B3C4D5E6F708192]  # 64-bit, as Flower's node ids
    msgs = [reply("alice", nodes[0], 1.0), reply("bob", nodes[1], -2.0), reply("carol", nodes[2], 0.5)]
    anon = Shuffler(referee, ["fc.weight"], seed=0).process(4, GLOBAL, msgs)
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
    assert sorted(referee.truth_for(np.array([a.update_id for a in anon]))) == ["alice", "bob", "carol"]


def test_shuffling_hides_arrival_order(tmp_path):
    orders = set()
    for seed in range(6):
        msgs = [reply(f"u{i}", i, float(i + 1), n=i + 1) for i in range(6)]
        anon = Shuffler(Referee(tmp_path / f"r{seed}"), ["fc.weight"], seed=seed).process(1, GLOBAL, msgs)
        orders.add(tuple(a.num_examples for a in anon))
    assert len(orders) > 1


def test_referee_scores_predictions(tmp_path):
    referee = Referee(tmp_path / "ref")
    for i, user in enumerate(["a", "b", "a", "c"]):
        referee.seal(f"id{i}", user, rnd=1 + i // 2)
    store = UpdateStore(tmp_path / "store")
    classes = np.array(["a", "b", "c"])
    scores = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.0, 0.1, 0.9]])
    store.write_predictions("mlp", np.array(["id0", "id1", "id2", "id3"]), np.array([1, 1, 2, 2]), classes, scores)
    m = referee.score(store, "mlp")
    assert m["top1"] == 0.75 and set(m["per_round"]) == {1, 2} and m["per_round"][1]["top1"] == 1.0
