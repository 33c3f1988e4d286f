"""The attack pool: the server's client of the gRPC attack service, off the FL critical path.

Tapped rounds and updates wait in a bounded queue (its depth is visible); one dispatcher per
worker takes the next task, sends it and waits for the worker's acknowledgement, so several
workers share the load. A task whose delivery fails (worker dead, restarting, unreachable) goes
back to the front and another worker takes it; the worker side de-duplicates redelivered updates
by update id (at-least-once delivery, exactly-once filing). In simulation the pool spawns its
workers as local processes (``python -m attacks.worker``) and a supervisor restarts any that
dies; in deployment it connects to the configured worker addresses.

Transport: a local worker serves on a Unix socket in a private folder (``attacks.worker_process``),
sandboxed (``attacks.sandbox``) unless the run switched that off; no TCP port is opened on the host.
Remote workers are reached over TCP with mutual TLS when the run names its CA and the pool's own
certificate (``attacks.tls``), so only this pool can submit to them and nothing crosses the
network in plaintext. A worker that dies while running a task gets the task redelivered once; a
task that kills a second worker fails with the cause of death (a signal, the OOM killer, a limit).
The pool exports the workers' task metrics (``leakbed_worker_*``) from their acknowledgements, so
workers need no network endpoint of their own.

Every tapped update is analysed, dropped (queue full) or failed (task error, or no worker took it
within the retry window), so ``tapped == analysed + dropped + failed`` always holds and is reported.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from attacks import transport
from attacks.knowledge import AttackerKnowledge
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.sandbox import Limits
from attacks.tls import TlsFiles, channel_credentials
from attacks.transport import pb, pb_grpc
from attacks.worker_process import WorkerProcess
from core import telemetry
from core.layout import check_run_id

log = logging.getLogger(__name__)
# One task may legitimately take long (shadow training of a big model for many known users, an MLP
# fit); a worker that dies is noticed at once (the connection drops), so this only bounds a hung one.
RPC_TIMEOUT = 6 * 3600.0  # [s]
MAX_RESTARTS = 20  # per local worker; beyond that a crash-looping worker stays down and is reported
TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
FitCallback = Callable[[str, bool], None]


@dataclass
class PoolStats:
    tapped: int = 0
    analysed: int = 0
    dropped: int = 0
    failed: int = 0
    duplicates: int = 0
    retries: int = 0
    worker_restarts: int = 0
    rounds_submitted: int = 0
    rounds_analysed: int = 0
    rounds_dropped: int = 0
    lag_rounds: int = 0
    max_lag_rounds: int = 0
    max_queue_depth: int = 0
    shadow_seconds: float = 0.0
    fit_seconds: dict[str, float] = field(default_factory=dict)
    partial_fits: int = 0
    tasks_by_worker: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def fitted(self, name: str) -> bool:
        """Whether the fit filed as ``name`` finished (a NaN time marks a failed one)."""
        seconds = self.fit_seconds.get(name)
        return seconds is not None and not math.isnan(seconds)


@dataclass(frozen=True)
class Fit:
    """One fit of an attack: its outputs filed under ``output`` (default: the attack's name), with ``params``
    overriding the run's parameters of it (a study's variant, e.g. another share of seen users), on the store
    named ``store`` under the pool's root (default: the run's)."""

    attack: str
    output: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    store: str = ""

    @property
    def name(self) -> str:
        """How the pool's fit times and errors name it: ``[store:]output``."""
        return f"{self.store}:{self.output or self.attack}" if self.store else self.output or self.attack


@dataclass
class _Task:
    kind: str  # round | updates | fit
    request: object
    count: int = 0  # updates in the batch
    round: int = 0
    name: str = ""  # fit: the attack
    partial: bool = False  # fit: an interim score during training
    first_tried: float = 0.0
    deaths: int = 0  # local workers that died while running it


class AttackPool:
    """Start with the attacker's knowledge; submit rounds and updates; ``fit`` fits the attackers."""

    def __init__(
        self,
        knowledge: AttackerKnowledge,
        store_root: str,
        *,
        workers: int,
        queue_size: int,
        submit_timeout: float,
        addresses: Sequence[str] = (),
        retry_seconds: float = 120.0,
        run_id: str = "",
        on_fit: FitCallback | None = None,
        sandbox: Limits | None = None,
        tls: TlsFiles | None = None,
        warm: bool = False,
        cuda: bool = False,
        log_dir: Path | None = None,
    ) -> None:
        root = Path(store_root).resolve()
        run_id = check_run_id(run_id or uuid.uuid4().hex[:12])
        # Workers read the knowledge from the run's store (a shared volume in deployment), once per run.
        knowledge.save(root / run_id)
        self._run = transport.run_msg(run_id)
        self._timeout = submit_timeout
        self._retry_seconds = retry_seconds
        self._on_fit = on_fit
        self._latest_round = 0
        self._tasks: queue.Queue[_Task] = queue.Queue(maxsize=queue_size)
        self._retry: queue.Queue[_Task] = queue.Queue()  # already accepted: unbounded, served first
        self._pending_fits = 0
        self._final_fits: set[str] = set()
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self.stats = PoolStats()
        self.local: list[WorkerProcess] = []
        if addresses:
            self.addresses = list(addresses)
        else:
            logs = log_dir or root.parent / f"{root.name}-logs"  # outside the store: no worker writes another's log
            self.local = [
                WorkerProcess(i, root, logs / f"worker-{i}.log", sandbox, warm=warm, cuda=cuda) for i in range(workers)
            ]
            self.addresses = [w.address for w in self.local]
        self.sandboxed = bool(self.local) and sandbox is not None
        self._healthy = [False] * len(self.addresses)
        self._last_healthy = time.monotonic()
        # mutual TLS to workers on TCP when the run names its files; a Unix socket (a local worker, a worker
        # container without network) is this machine's own channel
        tcp = [not a.startswith("unix:") for a in self.addresses]
        self.tls = tls is not None and any(tcp)
        credentials = channel_credentials(tls) if self.tls and tls is not None else None
        self._channels = [
            grpc.secure_channel(a, credentials, options=transport.GRPC_OPTIONS)
            if credentials is not None and over_tcp
            else grpc.insecure_channel(a, options=transport.GRPC_OPTIONS)
            for a, over_tcp in zip(self.addresses, tcp, strict=True)
        ]
        self._threads = [
            threading.Thread(target=self._dispatch, args=(i,), daemon=True, name=f"attack-dispatch-{i}")
            for i in range(len(self.addresses))
        ]
        self._threads.append(threading.Thread(target=self._supervise, daemon=True, name="attack-supervisor"))
        for t in self._threads:
            t.start()

    # --- queue ----------------------------------------------------------------------------

    def depth(self) -> int:
        """Tasks accepted but not yet handed to a worker."""
        return self._tasks.qsize() + self._retry.qsize()

    def lag_rounds(self) -> int:
        with self._lock:
            return self.stats.lag_rounds

    def _put(self, task: _Task) -> bool:
        try:
            self._tasks.put(task, timeout=self._timeout)
        except queue.Full:
            return False
        with self._lock:
            self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.depth())
        return True

    def _take(self) -> _Task | None:
        try:
            return self._retry.get_nowait()
        except queue.Empty:
            pass
        try:
            return self._tasks.get(timeout=0.2)
        except queue.Empty:
            return None

    # --- dispatch -------------------------------------------------------------------------

    def _dispatch(self, slot: int) -> None:
        stub = pb_grpc.AttackServiceStub(self._channels[slot])
        while not self._stop.is_set():
            if not self._healthy[slot]:
                try:
                    stub.Ping(pb.PingRequest(), timeout=1.0, wait_for_ready=True)
                except grpc.RpcError:
                    continue
                self._healthy[slot] = True
                self._last_healthy = time.monotonic()
            task = self._take()
            if task is None:
                continue
            task.first_tried = task.first_tried or time.monotonic()
            generation = self.local[slot].restarts if slot < len(self.local) else 0
            try:
                ack = self._call(stub, task)
            except grpc.RpcError as err:
                self._healthy[slot] = False
                died = self._death_of(slot, generation)
                if died:
                    task.deaths += 1
                    if task.deaths >= 2:
                        self._fail(task, f"{task.kind} task killed a second attack worker: worker {slot} {died}")
                        continue
                self._redeliver(task, f"{self.addresses[slot]}: {err.code().name}{f' (worker {died})' if died else ''}")
                continue
            self._healthy[slot] = True
            self._last_healthy = time.monotonic()
            self._acknowledge(task, ack, slot)

    def _death_of(self, slot: int, generation: int) -> str:
        """How local worker ``slot`` (as it was at restart count ``generation``) died during a call
        ('' when it lives on, or is remote); the supervisor may have restarted it already."""
        if slot >= len(self.local):
            return ""
        worker = self.local[slot]
        deadline = time.monotonic() + 10.0  # the connection drops before the process is reaped (later under load)
        while time.monotonic() < deadline:
            # restarts first: the supervisor counts a restart before it replaces ``proc`` with a live process
            if worker.restarts > generation:
                return worker.last_death
            if worker.proc.poll() is not None:
                return worker.death()
            time.sleep(0.05)
        return ""

    def _call(self, stub: pb_grpc.AttackServiceStub, task: _Task) -> pb.Ack:
        if task.kind == "round":
            return stub.Round(task.request, timeout=RPC_TIMEOUT)
        if task.kind == "updates":
            return stub.Updates(task.request, timeout=RPC_TIMEOUT)
        return stub.Fit(task.request, timeout=RPC_TIMEOUT)

    def _redeliver(self, task: _Task, why: str) -> None:
        if time.monotonic() - task.first_tried > self._retry_seconds:
            self._fail(task, f"{task.kind} task not delivered within {self._retry_seconds:.0f}s (last: {why})")
            return
        with self._lock:
            self.stats.retries += 1
        log.warning("attack task %s redelivered: %s", task.kind, why)
        self._retry.put(task)

    def _acknowledge(self, task: _Task, ack: pb.Ack, slot: int) -> None:
        telemetry.WORKER_TASKS.labels(kind=task.kind, outcome="error" if ack.error else "ok").inc()
        telemetry.WORKER_TASK_DURATION.labels(kind=task.kind).observe(ack.seconds)
        telemetry.WORKER_UPDATES_STORED.inc(ack.stored)
        telemetry.WORKER_DUPLICATES.inc(ack.duplicates)
        if ack.error:
            self._fail(task, ack.error)
            return
        s = self.stats
        with self._lock:
            s.tasks_by_worker[str(slot)] = s.tasks_by_worker.get(str(slot), 0) + 1
            if task.kind == "round":
                s.rounds_analysed += 1
                s.shadow_seconds += ack.seconds
                # how many rounds later than its own round the attack side finished this one
                s.lag_rounds = self._latest_round - task.round
                s.max_lag_rounds = max(s.max_lag_rounds, s.lag_rounds)
            elif task.kind == "updates":
                s.analysed += int(ack.stored + ack.duplicates)
                s.duplicates += int(ack.duplicates)
            elif task.partial:
                self._pending_fits -= 1
                s.partial_fits += 1
            else:
                s.fit_seconds[task.name] = ack.seconds
            self._lock.notify_all()
        if task.kind == "fit" and self._on_fit is not None:
            try:
                self._on_fit(task.name, task.partial)
            except Exception:  # a scoring hook must not stop the dispatcher
                log.exception("fit callback for %s failed", task.name)

    def _fail(self, task: _Task, message: str) -> None:
        s = self.stats
        log.error("attack task %s failed: %s", task.kind, message)
        with self._lock:
            s.errors.append(message)
            if task.kind == "updates":
                s.failed += task.count
            elif task.kind == "round":
                s.rounds_analysed += 1
            elif task.partial:
                self._pending_fits -= 1
            else:
                s.fit_seconds[task.name] = float("nan")
            self._lock.notify_all()

    # --- supervision ----------------------------------------------------------------------

    def _supervise(self) -> None:
        """Restart dead local workers; fail what is queued when no worker has been reachable for the retry window."""
        while not self._stop.wait(0.5):
            for w in self.local:
                code = w.proc.poll()
                if code is None or self._stop.is_set():
                    continue
                if w.restarts >= MAX_RESTARTS:
                    continue
                why = w.death()
                with self._lock:
                    self.stats.worker_restarts += 1
                    self.stats.errors.append(f"attack worker {w.index} exited with code {code} ({why}); restarted")
                log.warning("attack worker %d exited with code %s (%s); restarting", w.index, code, why)
                w.restart()
            if not any(self._healthy) and time.monotonic() - self._last_healthy > self._retry_seconds:
                while (task := self._take()) is not None:
                    self._fail(task, f"{task.kind} task failed: no attack worker reachable at {', '.join(self.addresses)}")

    # --- public interface -----------------------------------------------------------------

    def submit_round(self, snapshot: RoundSnapshot) -> None:
        """Hand over a round's global model; the attacker computes its shadow updates on it."""
        with self._lock:
            self._latest_round = max(self._latest_round, snapshot.round)
            self.stats.rounds_submitted += 1
        task = _Task("round", transport.round_request(self._run, snapshot), round=snapshot.round)
        if not self._put(task):
            with self._lock:
                self.stats.rounds_dropped += 1
                self.stats.errors.append(f"round {snapshot.round} dropped: queue full for {self._timeout}s")

    def submit_updates(self, updates: list[AnonymousUpdate]) -> None:
        """Tap anonymous updates; never raises, never silently loses one."""
        if not updates:
            return
        with self._lock:
            self.stats.tapped += len(updates)
        request = transport.updates_request(self._run, uuid.uuid4().hex[:12], updates)
        if not self._put(_Task("updates", request, count=len(updates), round=updates[0].round)):
            with self._lock:
                self.stats.dropped += len(updates)
                self.stats.errors.append(f"{len(updates)} updates dropped: queue full for {self._timeout}s")

    def _fit_request(self, job: str | Fit) -> tuple[str, pb.FitRequest]:
        job = Fit(job) if isinstance(job, str) else job
        params = json.dumps(job.params) if job.params else ""
        run = transport.run_msg(check_run_id(job.store)) if job.store else self._run
        request = pb.FitRequest(run=run, attack=job.attack, output=job.output, params_json=params)
        return job.name, request

    def score(self, attacks: Sequence[str | Fit]) -> None:
        """Queue an interim fit of each attack on what has arrived so far (``on_fit(name, True)`` when done)."""
        for job in attacks:
            name, request = self._fit_request(job)
            with self._lock:
                self._pending_fits += 1
            if not self._put(_Task("fit", request, name=name, partial=True)):
                with self._lock:
                    self._pending_fits -= 1
                    self.stats.errors.append(f"interim fit of {name} skipped: queue full for {self._timeout}s")

    def _settled(self) -> bool:
        s = self.stats
        return (
            s.analysed + s.dropped + s.failed >= s.tapped
            and s.rounds_analysed + s.rounds_dropped >= s.rounds_submitted
            and self._pending_fits <= 0
        )

    def drain(self, timeout: float = 3600.0) -> bool:
        """Wait until every submitted round, update and interim fit is acknowledged (or failed)."""
        with self._lock:
            return self._lock.wait_for(self._settled, timeout=timeout)

    def fit(self, attacks: Sequence[str | Fit], timeout: float = 3600.0) -> None:
        """Fit every attack (a name, or a study's ``Fit`` variant) in parallel workers, after the stream is drained;
        ``stats.fit_seconds`` is keyed by output name (NaN: the fit failed)."""
        self.drain(timeout)
        names = []
        for job in attacks:
            name, request = self._fit_request(job)
            names.append(name)
            with self._lock:
                self.stats.fit_seconds.pop(name, None)
            if not self._put(_Task("fit", request, name=name)):
                with self._lock:
                    self.stats.fit_seconds[name] = float("nan")
                    self.stats.errors.append(f"fit of {name} not queued: queue full for {self._timeout}s")
        with self._lock:
            done = self._lock.wait_for(lambda: all(n in self.stats.fit_seconds for n in names), timeout=timeout)
            if not done:
                for n in names:
                    if n not in self.stats.fit_seconds:
                        self.stats.fit_seconds[n] = float("nan")
                        self.stats.errors.append(f"fit of {n} did not finish within {timeout:.0f}s")

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for w in self.local:
            w.stop()
        for ch in self._channels:
            ch.close()
