"""The honest-but-curious aggregator: FedAvg that taps every anonymized reply before aggregating.

Seed 001 §4.1: the server runs the protocol faithfully (plain FedAvg aggregation) but hands every
de-identified update to its attacks. Failed and malformed replies are counted, never fatal.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from attacks import AttackPool, RoundSnapshot
from server.shuffler import Shuffler
from server.validation import reply_problem

log = logging.getLogger(__name__)
TRAIN_KEYS = ("epochs", "batch_size", "lr", "optimizer", "momentum", "steps")


class StartupTimeout(RuntimeError):
    """The devices of a run did not all connect in time."""


@dataclass
class RoundLog:
    sampled: int = 0
    received: int = 0
    failed: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0  # configure_train to the end of aggregate_train
    aggregation_seconds: float = 0.0  # validation, shuffling, tapping and aggregation


class CuriousFedAvg(FedAvg):
    def __init__(
        self,
        *,
        shuffler: Shuffler,
        pool: AttackPool,
        seed: int,
        uniform_weights: bool = False,
        max_reply_bytes: int = 0,
        startup_timeout: float = 300.0,
        share_participation: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        # attacks.linkage's intersection attack: the server knows whom it sent the task; tell the attacks as
        # per-run keyed pseudonyms (the shuffler's), never raw node ids
        self._share_participation = share_participation
        self._startup_timeout = startup_timeout
        self._uniform = uniform_weights  # dp-fedavg: equal weights, the sensitivity its noise is calibrated to
        self._seed = seed
        self._shuffler = shuffler
        self._pool = pool
        self._max_reply_bytes = max_reply_bytes  # 0: twice the global model
        self._round_t0 = time.monotonic()
        self._global: dict[str, np.ndarray] = {}
        self.rounds: dict[int, RoundLog] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Keep the round's global model (aggregate_train is not given it) and share it with the attacks."""
        self._round_t0 = time.monotonic()
        self._global = {k: v.numpy() for k, v in arrays.items()}
        config["server-round"] = server_round
        nodes = self._sample(server_round, grid)
        messages = list(
            self._construct_messages(
                RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config}), nodes, MessageType.TRAIN
            )
        )
        self.rounds[server_round] = RoundLog(sampled=len(messages))
        train_config = {**{k: config[k] for k in TRAIN_KEYS if k in config}, "participants": len(messages)}  # the server knows K
        if self._share_participation:
            train_config["sampled"] = ",".join(sorted(self._shuffler.pseudonym(n) for n in nodes))
        self._pool.submit_round(RoundSnapshot(server_round, self._global, train_config))
        return messages

    def _sample(self, server_round: int, grid: Grid) -> list[int]:
        """C·K devices from a per-round seeded RNG (FedAvg's sampler uses the shared global ``random``).

        Only the first round waits for the whole cohort, and at most ``startup_timeout``: a run
        whose devices never appear fails with a clear error instead of waiting for ever; a device
        lost later (crashed, disconnected) must not stall the run, the rounds go on without it."""
        deadline = time.monotonic() + self._startup_timeout
        while len(nodes := sorted(grid.get_node_ids())) < self.min_available_nodes and server_round == 1:
            if time.monotonic() > deadline:
                raise StartupTimeout(
                    f"only {len(nodes)} of {self.min_available_nodes} devices connected within "
                    f"fl.startup_timeout = {self._startup_timeout:g} s"
                )
            time.sleep(1)
        k = max(int(len(nodes) * self.fraction_train), self.min_train_nodes)
        return random.Random(f"{self._seed}/{server_round}").sample(nodes, min(k, len(nodes)))

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Drop failures and malformed replies, anonymize the rest, tap them, then aggregate normally."""
        stats = self.rounds.setdefault(server_round, RoundLog())
        t0 = time.monotonic()
        usable = []
        for msg in replies:
            stats.received += 1
            if msg.has_error():
                stats.failed += 1
                stats.reasons.append(f"error: {msg.error.reason}")
                continue
            problem = reply_problem(msg, self._global, self._max_reply_bytes)
            if problem:
                stats.rejected += 1
                stats.reasons.append(f"rejected: {problem}")
                log.warning("round %d: rejected a reply: %s", server_round, problem)
                continue
            usable.append(msg)
        if (missing := stats.sampled - stats.received) > 0:  # devices lost mid-round (crashed, disconnected)
            stats.failed += missing
            stats.reasons.append(f"error: {missing} sampled device(s) sent no reply")
        usable.sort(key=_digest)  # arrival order must not change the (floating-point) aggregate
        anonymous = self._shuffler.process(server_round, self._global, usable)
        self._pool.submit_updates(anonymous)
        if not usable:
            return self._timed(stats, t0, (None, None))
        if self._uniform:
            for msg in usable:
                msg.content.metric_records["metrics"]["num-examples"] = 1
        return self._timed(stats, t0, super().aggregate_train(server_round, usable))

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
