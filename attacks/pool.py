"""The attack worker pool: processes fed through a bounded queue, off the FL critical path.

Every tapped update is either analysed (filed for the attacks) or counted as dropped or failed,
so ``tapped == analysed + dropped + failed`` always holds and is reported.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import pickle
import queue
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attacks.knowledge import AttackerKnowledge
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.worker import worker_main

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    tapped: int = 0
    analysed: int = 0
    dropped: int = 0
    failed: int = 0
    rounds_submitted: int = 0
    rounds_analysed: int = 0
    rounds_dropped: int = 0
    max_lag_rounds: int = 0
    shadow_seconds: float = 0.0
    fit_seconds: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class AttackPool:
    """Start with the attacker's knowledge; submit rounds and updates; ``finish`` fits the attackers."""

    def __init__(
        self, knowledge: AttackerKnowledge, store_root: str, *, workers: int, queue_size: int, submit_timeout: float
    ) -> None:
        ctx = mp.get_context("spawn")
        # Workers read the knowledge from a file: spawn would otherwise pickle it through each
        # child's pipe and block start-up until the child has imported torch.
        knowledge_path = Path(store_root) / "knowledge.pkl"
        knowledge_path.parent.mkdir(parents=True, exist_ok=True)
        knowledge_path.write_bytes(pickle.dumps(knowledge))
        self._latest_round = 0
        self._reported_dead = False
        self._tasks = ctx.Queue(maxsize=queue_size)
        self._acks = ctx.Queue()
        self._timeout = submit_timeout
        self.stats = PoolStats()
        self._lock = threading.Condition()
        self._procs = [
            ctx.Process(
                target=worker_main,
                args=(i, str(knowledge_path), store_root, self._tasks, self._acks),
                daemon=True,
                name=f"attack-worker-{i}",
            )
            for i in range(workers)
        ]
        for p in self._procs:
            p.start()
        self._listener = threading.Thread(target=self._listen, daemon=True, name="attack-acks")
        self._listener.start()

    def _listen(self) -> None:
        while True:
            ack = self._acks.get()
            if ack is None:
                return
            with self._lock:
                self._record(ack)
                self._lock.notify_all()

    def _record(self, ack: tuple) -> None:
        s = self.stats
        kind = ack[0]
        if kind == "round":
            s.rounds_analysed += 1
            s.shadow_seconds += ack[2]
            # how many rounds later than its own round the attack side finished this one
            s.max_lag_rounds = max(s.max_lag_rounds, self._latest_round - ack[1])
        elif kind == "updates":
            s.analysed += ack[2]
        elif kind == "fit":
            s.fit_seconds[ack[1]] = ack[2]
        else:
            _, failed_kind, name, message, trace, n = ack
            s.errors.append(message)
            log.error("attack task %s failed: %s\n%s", failed_kind, message, trace)
            if failed_kind == "updates":
                s.failed += n
            elif failed_kind == "round":
                s.rounds_analysed += 1
            elif failed_kind == "fit":
                s.fit_seconds[name] = float("nan")

    def _put(self, item: tuple) -> bool:
        try:
            self._tasks.put(item, timeout=self._timeout)
            return True
        except queue.Full:
            return False

    def submit_round(self, snapshot: RoundSnapshot) -> None:
        """Hand over a round's global model; the attacker computes its shadow updates on it."""
        with self._lock:
            self._latest_round = max(self._latest_round, snapshot.round)
            self.stats.rounds_submitted += 1
        if not self._put(("round", snapshot)):
            with self._lock:
                self.stats.rounds_dropped += 1
                self.stats.errors.append(f"round {snapshot.round} dropped: queue full for {self._timeout}s")

    def submit_updates(self, updates: list[AnonymousUpdate]) -> None:
        """Tap anonymous updates; never raises, never silently loses one."""
        if not updates:
            return
        with self._lock:
            self.stats.tapped += len(updates)
        if not self._put(("updates", uuid.uuid4().hex[:12], updates)):
            with self._lock:
                self.stats.dropped += len(updates)
                self.stats.errors.append(f"{len(updates)} updates dropped: queue full for {self._timeout}s")

    def drain(self, timeout: float = 3600.0) -> bool:
        """Wait until every submitted round and update is acknowledged."""
        deadline = time.monotonic() + timeout
        with self._lock:
            s = self.stats
            return self._lock.wait_for(
                lambda: (
                    (s.analysed + s.dropped + s.failed >= s.tapped and s.rounds_analysed + s.rounds_dropped >= s.rounds_submitted)
                    or not self._alive()
                ),
                timeout=max(0.0, deadline - time.monotonic()),
            )

    def _alive(self) -> bool:
        alive = any(p.is_alive() for p in self._procs)
        if not alive and not self._reported_dead:
            self._reported_dead = True
            codes = [p.exitcode for p in self._procs]
            self.stats.errors.append(f"every attack worker exited (exit codes {codes}); work still queued was not analysed")
        return alive

    def fit(self, attackers: list[str], timeout: float = 3600.0) -> None:
        """Fit and score every attacker in parallel workers, after the stream is drained."""
        self.drain(timeout)
        for name in attackers:
            if not self._put(("fit", name)):
                with self._lock:
                    self.stats.fit_seconds[name] = float("nan")
                    self.stats.errors.append(f"fit of {name} not queued: queue full for {self._timeout}s")
        with self._lock:
            self._lock.wait_for(lambda: all(n in self.stats.fit_seconds for n in attackers) or not self._alive(), timeout=timeout)

    def close(self) -> None:
        for _ in self._procs:
            try:
                self._tasks.put(None, timeout=5)
            except queue.Full:
                break
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        self._acks.put(None)
        self._listener.join(timeout=5)
