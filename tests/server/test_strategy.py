import uuid

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from referee.seal import Sealer
from server.shuffler import TRUTH_KEY, Shuffler
from server.strategy import CuriousFedAvg
from tests.conftest import arrays_of, fake_message

GLOBAL = {"fc.weight": np.zeros((3, 2), np.float32), "fc.bias": np.zeros(3, np.float32)}


class FakeGrid:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node_ids(self):
        return set(self.nodes)


class RecordingPool:
    def __init__(self):
        self.rounds, self.updates = [], []

    def submit_round(self, snap):
        self.rounds.append(snap)

    def submit_updates(self, updates):
        self.updates.append(updates)


@pytest.fixture(autouse=True)
def _run_identity(monkeypatch):
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def strategy(tmp_path, pool, seed=0, fraction=0.5):
    return CuriousFedAvg(
        shuffler=Shuffler(Sealer(tmp_path / f"ref-{uuid.uuid4().hex}"), ["fc.weight", "fc.bias"]),
        pool=pool,
        seed=seed,
        fraction_train=fraction,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=2,
    )


def good(user, value, n=5):
    return fake_message(
        RecordDict(
            {
                "arrays": arrays_of({k: v + value for k, v in GLOBAL.items()}),
                "metrics": MetricRecord({"num-examples": n}),
                TRUTH_KEY: ConfigRecord({"user-id": user}),
            }
        )
    )


def config():
    return ConfigRecord(
        {"epochs": 1, "batch_size": 4, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0, "experiment": "{}", "prior-rule": "random"}
    )


def test_sampling_is_a_function_of_seed_and_round(tmp_path):
    grid = FakeGrid(range(100, 120))
    picks = [
        [
            m.metadata.dst_node_id
            for m in strategy(tmp_path, RecordingPool(), seed=s).configure_train(r, arrays_of(GLOBAL), config(), grid)
        ]
        for s, r in ((0, 1), (0, 1), (0, 2), (1, 1))
    ]
    assert len(picks[0]) == 10 and picks[0] == picks[1] and picks[0] != picks[2] and picks[0] != picks[3]


def test_round_snapshot_and_tap_before_aggregation(tmp_path):
    pool = RecordingPool()
    s = strategy(tmp_path, pool)
    s.configure_train(3, arrays_of(GLOBAL), config(), FakeGrid([1, 2, 3, 4]))
    assert (
        pool.rounds[0].round == 3 and pool.rounds[0].train_config["lr"] == 0.1 and "experiment" not in pool.rounds[0].train_config
    )
    arrays, metrics = s.aggregate_train(3, [good("a", 1.0, n=1), good("b", 3.0, n=3)])
    assert np.allclose(arrays["fc.weight"].numpy(), 2.5), "plain FedAvg weighted mean of the replies"
    assert metrics is not None
    assert len(pool.updates[0]) == 2 and {u.round for u in pool.updates[0]} == {3}


def test_failures_and_malformed_replies_are_counted_not_fatal(tmp_path):
    pool = RecordingPool()
    s = strategy(tmp_path, pool)
    s.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid([1, 2]))
    failed = fake_message(None, error="node crashed")
    nan = good("c", 1.0)
    nan.content["arrays"] = arrays_of({"fc.weight": np.full((3, 2), np.nan, np.float32), "fc.bias": np.zeros(3, np.float32)})
    wrong_shape = good("d", 1.0)
    wrong_shape.content["arrays"] = arrays_of({"fc.weight": np.zeros((9, 9), np.float32), "fc.bias": np.zeros(3, np.float32)})
    no_truth = good("e", 1.0)
    del no_truth.content[TRUTH_KEY]
    arrays, _ = s.aggregate_train(1, [failed, nan, wrong_shape, no_truth, good("a", 2.0)])
    log = s.rounds[1]
    assert (log.received, log.failed, log.rejected) == (5, 1, 3)
    assert np.allclose(arrays["fc.weight"].numpy(), 2.0) and len(pool.updates[0]) == 1


def test_a_round_with_no_usable_reply_keeps_the_model(tmp_path):
    s = strategy(tmp_path, RecordingPool())
    s.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid([1, 2]))
    failed = fake_message(None, error="timeout")
    assert s.aggregate_train(1, [failed]) == (None, None)


def test_a_cohort_that_never_connects_fails_within_the_startup_timeout(tmp_path):
    import time

    from server.strategy import StartupTimeout

    s = CuriousFedAvg(
        shuffler=Shuffler(Sealer(tmp_path / "ref-start"), ["fc.weight", "fc.bias"]),
        pool=RecordingPool(),
        seed=0,
        startup_timeout=1.5,
        fraction_train=0.5,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=3,
    )
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout, match="only 1 of 3 devices connected within fl.startup_timeout = 1.5 s"):
        s._sample(1, FakeGrid([11]))
    assert 1.4 < time.monotonic() - t0 < 10
    assert len(s._sample(2, FakeGrid([11]))) == 1  # later rounds go on with whoever is still there
