"""The curious tap: a strategy wrapper around FedAvg (or Flower's DP wrapper around FedAvg) that samples cohorts by
the devices' tickets, taps every usable reply through the shuffler before the wrapped strategy aggregates, and
counts failures; under SecAgg+ one aggregate reply stands for the round."""

import random
import time
import uuid

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM
from flwr.supercore.task_identity import TaskIdentity

from leakbed.core.derive import node_ticket
from leakbed.core.plan import TICKET_KEY
from leakbed.defenses.dp import DPParams, SeededDpFixedClipping
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee
from leakbed.server.sampling import StartupTimeout, TicketSampler
from leakbed.server.shuffler import AGGREGATE_KEY, TRUTH_KEY, Shuffler
from leakbed.server.tap import CuriousTap
from tests.conftest import arrays_of, fake_message


def fedavg() -> FedAvg:
    """FedAvg as the tap wraps it: it takes every node of the cohort it is shown."""
    return FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1, min_evaluate_nodes=0, min_available_nodes=1)


GLOBAL = {"fc.weight": np.zeros((3, 2), np.float32), "fc.bias": np.zeros(3, np.float32)}
TICKETS = 77


class FakeGrid:
    """Nodes (random ids) holding partitions 0..n-1; query messages are answered with the partition's ticket."""

    def __init__(self, partitions: int, ids_seed: int = 0) -> None:
        rng = random.Random(ids_seed)
        self.partition = {rng.getrandbits(63) + 1: p for p in range(partitions)}
        self.queries = 0

    def get_node_ids(self):
        return list(self.partition)

    def send_and_receive(self, messages, timeout=None):
        out = []
        for m in messages:
            assert m.metadata.message_type == MessageType.QUERY
            self.queries += 1
            ticket = node_ticket(int(m.content.config_records["config"][TICKET_KEY]), self.partition[m.metadata.dst_node_id])
            out.append(fake_message(RecordDict({"config": ConfigRecord({"ticket": str(ticket)})}), src=m.metadata.dst_node_id))
        return out


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


def tap(tmp_path, pool, *, seed=0, fraction=0.5, users=4, inner=None, uniform=False, startup=30.0):
    sealer = Sealer(tmp_path / f"ref-{uuid.uuid4().hex}")
    strategy = CuriousTap(
        inner or fedavg(),
        sampler=TicketSampler(seed, TICKETS, fraction, users, startup),
        shuffler=Shuffler(sealer, ["fc.weight", "fc.bias"]),
        pool=pool,
        uniform_weights=uniform,
    )
    return strategy, sealer


def good(user, value, n=5, src=11):
    return fake_message(
        RecordDict(
            {
                "arrays": arrays_of({k: v + value for k, v in GLOBAL.items()}),
                "metrics": MetricRecord({"num-examples": n}),
                TRUTH_KEY: ConfigRecord({"user-id": user}),
            }
        ),
        src=src,
    )


def config():
    return ConfigRecord({"epochs": 1, "batch_size": 4, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0, "steps": 0, "plan": "{}"})


def _cohort(strategy, grid, rnd=1):
    """The partitions (users) sampled; FedAvg orders its messages at random, the tap's replies are sorted anyway."""
    messages = strategy.configure_train(rnd, arrays_of(GLOBAL), config(), grid)
    return sorted(grid.partition[m.metadata.dst_node_id] for m in messages)


def test_the_cohort_is_a_function_of_seed_round_and_tickets_not_of_node_ids(tmp_path):
    pick = lambda seed, rnd, ids: _cohort(tap(tmp_path, RecordingPool(), seed=seed, users=20)[0], FakeGrid(20, ids), rnd)  # noqa: E731
    first = pick(0, 1, ids=0)
    assert len(first) == 10 and pick(0, 1, ids=5) == first  # other node ids, the same users
    assert pick(0, 2, ids=0) != first and pick(1, 1, ids=0) != first


def test_tickets_are_the_node_ids_the_seeded_simulation_gave(tmp_path):
    """Earlier versions patched the in-process simulation's node ids to a seeded draw; a device's ticket is that id,
    so the same seed samples the same users as before."""
    rng, drawn = random.Random(f"leakbed-node-ids/{TICKETS}"), []
    while len(drawn) < 6:
        value = rng.getrandbits(64)
        if value and value not in drawn:
            drawn.append(value)
    assert [node_ticket(TICKETS, p) for p in range(6)] == drawn


def test_each_device_is_asked_its_ticket_once(tmp_path):
    strategy, _ = tap(tmp_path, RecordingPool())
    grid = FakeGrid(4)
    for rnd in (1, 2, 3):
        _cohort(strategy, grid, rnd)
    assert grid.queries == 4


def test_round_snapshot_and_tap_before_aggregation(tmp_path):
    pool = RecordingPool()
    strategy, _ = tap(tmp_path, pool)
    messages = list(strategy.configure_train(3, arrays_of(GLOBAL), config(), FakeGrid(4)))
    assert len(messages) == 2 and all(m.content.config_records["config"]["server-round"] == 3 for m in messages)
    snap = pool.rounds[0]
    assert snap.round == 3 and snap.train_config["lr"] == 0.1 and snap.train_config["participants"] == 2
    assert "plan" not in snap.train_config  # the attack side gets the training keys, not the devices' plan
    arrays, metrics = strategy.aggregate_train(3, [good("a", 1.0, n=1), good("b", 3.0, n=3)])
    assert np.allclose(arrays["fc.weight"].numpy(), 2.5), "plain FedAvg weighted mean of the replies"
    assert metrics is not None and strategy.releases == 1
    assert len(pool.updates[0]) == 2 and {u.round for u in pool.updates[0]} == {3}


def test_failures_and_malformed_replies_are_counted_not_fatal(tmp_path):
    pool = RecordingPool()
    strategy, _ = tap(tmp_path, pool, users=2, fraction=1.0)
    strategy.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid(2))
    failed = fake_message(None, error="node crashed")
    nan = good("c", 1.0)
    nan.content["arrays"] = arrays_of({"fc.weight": np.full((3, 2), np.nan, np.float32), "fc.bias": np.zeros(3, np.float32)})
    wrong_shape = good("d", 1.0)
    wrong_shape.content["arrays"] = arrays_of({"fc.weight": np.zeros((9, 9), np.float32), "fc.bias": np.zeros(3, np.float32)})
    no_truth = good("e", 1.0)
    del no_truth.content[TRUTH_KEY]
    arrays, _ = strategy.aggregate_train(1, [failed, nan, wrong_shape, no_truth, good("a", 2.0)])
    log = strategy.rounds[1]
    assert (log.received, log.failed, log.rejected) == (5, 1, 3)
    assert np.allclose(arrays["fc.weight"].numpy(), 2.0) and len(pool.updates[0]) == 1


def test_a_round_with_no_usable_reply_keeps_the_model(tmp_path):
    strategy, _ = tap(tmp_path, RecordingPool(), users=2)
    strategy.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid(2))
    assert strategy.aggregate_train(1, [fake_message(None, error="timeout")]) == (None, None) and strategy.releases == 0


def test_a_cohort_that_never_connects_fails_within_the_startup_timeout(tmp_path):
    strategy, _ = tap(tmp_path, RecordingPool(), users=3, startup=1.5)
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout, match="only 1 of 3 devices connected within fl.startup_timeout = 1.5 s"):
        strategy.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid(1))
    assert 1.4 < time.monotonic() - t0 < 10
    assert len(list(strategy.configure_train(2, arrays_of(GLOBAL), config(), FakeGrid(1)))) == 1  # later rounds go on


def test_dp_fedavg_wraps_fedavg_inside_the_tap(tmp_path):
    """The devices get the clipping norm from Flower's wrapper; the tap sees the clipped updates (central DP trusts
    the aggregator); the noise lands on the aggregate only; a round with a failure is skipped whole, as Flower's
    wrapper does."""
    pool = RecordingPool()
    inner = fedavg()
    dp = SeededDpFixedClipping(inner, DPParams(noise_multiplier=1.0, clip=0.5), 2, secret=0)
    strategy, _ = tap(tmp_path, pool, inner=dp, uniform=True)
    messages = list(strategy.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid(4)))
    assert all(m.content.config_records["config"][KEY_CLIPPING_NORM] == 0.5 for m in messages)
    arrays, _ = strategy.aggregate_train(1, [good("a", 0.1, n=9), good("b", 0.3, n=1)])
    tapped = np.stack([u.vector for u in pool.updates[0]])
    assert tapped.shape[0] == 2 and dp.releases == 1 and strategy.releases == 1
    noise = arrays["fc.weight"].numpy() - 0.2  # equal weights (uniform): the plain mean is 0.2
    assert 0 < np.abs(noise).max() and np.abs(noise).max() < 5 * 1.0 * 0.5 / 2 * 3
    strategy.configure_train(2, arrays_of(GLOBAL), config(), FakeGrid(4))
    assert strategy.aggregate_train(2, [good("a", 0.1), fake_message(None, error="crash")]) == (None, None)
    assert len(pool.updates) == 2 and len(pool.updates[1]) == 1  # the good reply was still tapped


def test_an_aggregate_reply_counts_the_protocols_participants_and_seals_no_node(tmp_path):
    pool = RecordingPool()
    strategy, sealer = tap(tmp_path, pool)
    strategy.configure_train(1, arrays_of(GLOBAL), config(), FakeGrid(4))
    reply = good("aggregate:a b", 0.5, n=10)
    reply.content[TRUTH_KEY] = ConfigRecord({"user-id": "aggregate:a b", "has-property": 1, "participants": 2, "holders": 1})
    reply.content[AGGREGATE_KEY] = ConfigRecord({"participants": 2, "dropouts": 1})
    arrays, _ = strategy.aggregate_train(1, [reply])
    log = strategy.rounds[1]
    assert (log.received, log.failed) == (3, 1) and np.allclose(arrays["fc.weight"].numpy(), 0.5)
    assert AGGREGATE_KEY not in reply.content.config_records and TRUTH_KEY not in reply.content.config_records
    [record] = Referee.load(sealer.folder).records()
    assert record["user_id"] == "aggregate:a b" and record["holders"] == 1 and "node" not in record


def test_query_messages_carry_the_ticket_seed_only():
    grid = FakeGrid(2)
    sampler = TicketSampler(0, TICKETS, 1.0, 2, 5.0)
    sent: list[Message] = []
    original = grid.send_and_receive
    grid.send_and_receive = lambda messages, timeout=None: sent.extend(messages) or original(messages, timeout)
    sampler.sample(grid, 1, 5.0)
    assert {tuple(m.content.config_records["config"].keys()) for m in sent} == {(TICKET_KEY,)}
