"""The honest-but-curious aggregator: a strategy wrapper that taps every anonymized reply before aggregating.

Seed 001 §4.1: the server runs the protocol faithfully but hands every de-identified update to its
attacks. ``CuriousTap`` wraps any Flower strategy (FedAvg, or Flower's DP wrapper around FedAvg), as
Flower's own DP wrappers wrap strategies: it samples each round's cohort by the devices' tickets
(``server.sampling``), lets the wrapped strategy build the round's messages for exactly that cohort,
hands the round's global model to the attack pool, and, on the way back, drops failed and malformed
replies (counted, never fatal), passes the rest through the shuffler (identity stripped, truth sealed)
to the pool, and only then lets the wrapped strategy aggregate them. Under SecAgg+ the round comes back
as one aggregate reply (``server.secagg``), tapped as one anonymous update.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from leakbed.core.records import RoundSnapshot
from leakbed.core.training import TrainConfig
from leakbed.server.sampling import TicketSampler
from leakbed.server.shuffler import AGGREGATE_KEY, Shuffler
from leakbed.server.validation import reply_problem
from leakbed.workers import AttackPool

log = logging.getLogger(__name__)


@dataclass
class RoundLog:
    sampled: int = 0
    received: int = 0
    failed: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0  # configure_train to the end of aggregate_train
    aggregation_seconds: float = 0.0  # validation, shuffling, tapping and aggregation
    evaluation_seconds: float = 0.0  # the global model's utility on the users' held-out data, after aggregation


class Cohort:
    """A view of a grid whose nodes are this round's cohort: the wrapped strategy's own sampling then takes
    all of them (its fraction is 1), and everything else goes to the grid."""

    def __init__(self, grid: Grid, nodes: list[int]) -> None:
        self._grid = grid
        self._nodes = nodes

    def get_node_ids(self) -> list[int]:
        return list(self._nodes)

    def __getattr__(self, name: str) -> object:
        return getattr(self._grid, name)


class CuriousTap(Strategy):
    def __init__(
        self,
        strategy: Strategy,
        *,
        sampler: TicketSampler,
        shuffler: Shuffler,
        pool: AttackPool,
        uniform_weights: bool = False,
        max_reply_bytes: int = 0,
        share_participation: bool = False,
        timeout: float = 600.0,
    ) -> None:
        super().__init__()
        self.strategy = strategy  # built to take every node it is shown (fraction_train = 1)
        self._sampler = sampler
        self._shuffler = shuffler
        self._pool = pool
        self._uniform = uniform_weights  # dp-fedavg: equal weights, the sensitivity its noise is calibrated to
        self._max_reply_bytes = max_reply_bytes  # 0: twice the global model
        # attacks.linkage's intersection attack: the server knows whom it sent the task; tell the attacks as
        # per-run keyed pseudonyms (the shuffler's), never raw node ids
        self._share_participation = share_participation
        self._timeout = timeout
        self._round_t0 = time.monotonic()
        self._global: dict[str, np.ndarray] = {}
        self.rounds: dict[int, RoundLog] = {}
        self.releases = 0  # rounds whose aggregate became the next global model (DP accounting counts them)

    def summary(self) -> None:
        self.strategy.summary()

    def shuffler_stats(self) -> dict:
        """The shuffler's batching counts (held, released, withheld...), for ``metrics.json``."""
        return self._shuffler.batching.stats.to_dict()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Sample the cohort, keep the round's global model (aggregate_train is not given it) and share it with the attacks."""
        self._round_t0 = time.monotonic()
        self._global = {k: v.numpy() for k, v in arrays.items()}
        nodes = self._sampler.sample(grid, server_round, self._timeout)
        messages = list(self.strategy.configure_train(server_round, arrays, config, Cohort(grid, nodes)))  # type: ignore[arg-type]
        self.rounds[server_round] = RoundLog(sampled=len(messages))
        train = {**TrainConfig.from_config(config).to_config(), "participants": len(messages)}  # the server knows K
        if self._share_participation:
            train["sampled"] = ",".join(sorted(self._shuffler.pseudonym(n) for n in nodes))
        self._pool.submit_round(RoundSnapshot(server_round, self._global, train))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Drop failures and malformed replies, anonymize the rest, tap them, then aggregate with the wrapped strategy."""
        stats = self.rounds.setdefault(server_round, RoundLog())
        t0 = time.monotonic()
        usable, errors, aggregate = [], [], False
        for msg in replies:
            if not msg.has_error() and AGGREGATE_KEY in msg.content.config_records:  # SecAgg+: the round in one reply
                aggregate, facts = True, msg.content.config_records[AGGREGATE_KEY]
                stats.received += int(facts["participants"]) + int(facts["dropouts"])
                stats.failed += int(facts["dropouts"])
            else:
                stats.received += 1
            if msg.has_error():
                stats.failed += 1
                stats.reasons.append(f"error: {msg.error.reason}")
                errors.append(msg)
                continue
            problem = reply_problem(msg, self._global, self._max_reply_bytes)
            if problem:
                stats.rejected += 1
                stats.reasons.append(f"rejected: {problem}")
                log.warning("round %d: rejected a reply: %s", server_round, problem)
                continue
            usable.append(msg)
        if not aggregate and (missing := stats.sampled - stats.received) > 0:  # devices lost mid-round (crashed, disconnected)
            stats.failed += missing
            stats.reasons.append(f"error: {missing} sampled device(s) sent no reply")
        usable.sort(key=_digest)  # arrival order must not change the (floating-point) aggregate
        self._pool.submit_updates(self._shuffler.process(server_round, self._global, usable))
        if not usable:
            return self._timed(stats, t0, (None, None))
        if self._uniform:
            for msg in usable:
                msg.content.metric_records["metrics"]["num-examples"] = 1
        # error replies go on too: a wrapper such as Flower's DP one skips a round with failures whole
        arrays, metrics = self.strategy.aggregate_train(server_round, [*usable, *errors])
        self.releases += arrays is not None
        return self._timed(stats, t0, (arrays, metrics))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def _timed(self, stats: RoundLog, t0: float, result: tuple) -> tuple:
        stats.aggregation_seconds = time.monotonic() - t0
        stats.seconds = time.monotonic() - self._round_t0
        return result


def _digest(msg: Message) -> str:
    """A content hash giving replies an order independent of arrival."""
    h = hashlib.sha1()
    for _, arr in sorted(msg.content.array_records["arrays"].items()):
        h.update(arr.data)
    return h.hexdigest()
