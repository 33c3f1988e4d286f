"""The attack pool: trusted code between the curious server and the attacks, off the FL critical path.

Tapped rounds and anonymous updates wait in a bounded queue (its depth is visible); one writer thread files them
into the prior's store (the attacks' inputs: written by trusted code only, read-only to every sandbox). Each
attack then runs in a *lane* of its own, one sandbox per attack and prior (``workers.lane``): the shadow lanes train
the attacker's shadow updates on each round's global model (the pool checks them and files them into the store),
an attack's lane runs its per-round hook, then ``fit`` and ``predict``. A prior has ``shadow_lanes`` shadow lanes, so
the shadow training keeps up with the federation on the cores the attack side is given. With ``shadow_shares``, lane
k of n trains share k of every round's known users (``attacks.shadow.share_of``, each user as the whole set trains
it: a round is ready in about 1/n of a lone lane's time); without, each round goes whole to the least busy lane.
Either way a round's updates are a lone lane's, bit for bit (the caller shares rounds only where the training gives
each user the same bits in any share: ``core.batched_training.stack_invariant``); the pool checks each share, files
the round once every share is in (in the knowledge's order, as a lone lane files it; a share that fails leaves the
round without shadow updates, as a lone lane's failure did), and the attacks' per-round hooks follow the rounds in
the order they were filed. No attack shares a process, a folder or an output with
another; an attack that builds on another's outputs (``Declaration.builds_on``) is handed them, checked and
read-only, once they are written.

What a lane hands back is hostile data (``workers.hostile``): replies are bounded, arrays are checked before they
are allocated, texts are shown as the attack's words, numbers are checked (``workers.numbers``). Every task has a
deadline (``workers.task_deadline``, or the attack's own budget parameter where that is shorter); a task past it is
ended and counted failed with "deadline", and the federation and the other attacks go on. A lane that dies during a
task is restarted and the task retried once; a task that kills a second lane fails with the cause of death; a lane
that breaks the protocol (a malformed reply) fails its task at once. Outputs handed to an attack that builds on them
are checked again, as the ranking they must be: refused ones are not handed over, and the refusal is the upstream
attack's. At most ``count`` lane tasks run at once.

Every tapped update is filed, dropped (queue full) or failed, so ``tapped == analysed + dropped + failed`` always
holds and is reported. Lanes run on this host (sandboxes spawned here) or on remote attack workers
(``workers.hosts.RemoteHost``), which spawn the same sandboxes on theirs.
"""

from __future__ import annotations

import io
import logging
import math
import os
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core import telemetry
from leakbed.core.declaration import Declaration
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.layout import check_run_id
from leakbed.core.records import AnonymousUpdate, RoundSnapshot
from leakbed.core.store import UpdateStore
from leakbed.workers.hostile import ArraySpec, HostileData, load_npz
from leakbed.workers.hosts import Host, Lane, LocalHost, RemoteHost
from leakbed.workers.lane import LaneBroke, LaneDeadline, LaneDied, LaneSpec, TaskFailed
from leakbed.workers.numbers import task_deadline, upstream_outputs
from leakbed.workers.sandbox import Limits
from leakbed.workers.tls import TlsFiles

log = logging.getLogger(__name__)
SHADOW = "shadow.training"  # the shadow lane's output name: never a plugin's (plugin names hold no ".")
FitCallback = Callable[[str, bool], None]
ProgressCallback = Callable[[dict[str, int]], None]  # AttackPool.progress()'s figures, each time they change
BUILTIN = "leakbed"  # the distribution of leakbed's own attacks (whose code another built-in attack may run)
SHADOW_SCHEMA = {"labels": ArraySpec(kinds="U", shape=("n",)), "vectors": ArraySpec(kinds="f", shape=("n", None))}


@dataclass
class PoolStats:
    tapped: int = 0
    analysed: int = 0  # anonymous updates filed into the store
    dropped: int = 0
    failed: int = 0
    duplicates: int = 0
    retries: int = 0
    worker_restarts: int = 0  # lanes restarted after dying during a task
    rounds_submitted: int = 0
    rounds_analysed: int = 0
    rounds_dropped: int = 0
    lag_rounds: int = 0
    max_lag_rounds: int = 0
    max_queue_depth: int = 0
    shadow_seconds: float = 0.0  # summed over the shadow lanes' round tasks
    shadow_lanes: int = 0  # lanes of this prior training the shadow updates
    shadow_split: str = ""  # how they share the rounds: "shares" of every round, or "rounds" whole
    fits_running: int = 0  # fit tasks (interim ones included) in a lane right now
    fit_seconds: dict[str, float] = field(default_factory=dict)
    partial_fits: int = 0
    tasks_by_worker: dict[str, int] = field(default_factory=dict)  # by lane
    tasks_by_host: dict[str, int] = field(default_factory=dict)  # by where the lane ran ("remote unix:/run/...")
    deadlines: int = 0  # tasks ended at their deadline
    lanes_started: int = 0
    lane_start_seconds: float = 0.0  # summed over lane starts (sandbox, imports, knowledge)
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
    op: str  # round | fit
    round: int = 0
    name: str = ""  # fit: the pool's name of it
    partial: bool = False
    deadline: float = 0.0
    deaths: int = 0
    store: str = ""
    share: tuple[int, int] = (0, 1)  # a shadow round: the k-th of n shares of the known users


@dataclass
class _ShadowRound:
    """A round's shares as the shadow lanes hand them back: (labels, vectors) by share; how many ended."""

    parts: dict[int, tuple[list[str], np.ndarray]] = field(default_factory=dict)
    ended: int = 0
    failed: bool = False


@dataclass
class _Lane:
    """A lane's queue and thread; its process is started on its first task and restarted after a death."""

    spec: LaneSpec
    store: str
    host: Host
    tasks: deque[_Task] = field(default_factory=deque)
    handle: Lane | None = None
    thread: threading.Thread | None = None
    done: bool = False  # stop once its queue is empty
    running: bool = False  # a task of it is in its lane now

    def load(self) -> int:
        """Tasks queued or running (a whole round goes to the least loaded shadow lane)."""
        return len(self.tasks) + self.running


class AttackPool:
    """Start with the attacker's knowledge and the declarations of the attacks it runs; submit rounds and updates;
    ``fit`` fits the attacks, each in its own lane; outputs, checked, go to ``outputs`` (``<name>.npz``)."""

    def __init__(
        self,
        knowledge: AttackerKnowledge,
        store_root: str | Path,
        *,
        declarations: dict[str, Declaration],
        params: dict[str, dict[str, Any]],
        outputs: Path,
        count: int = 2,
        queue_size: int = 256,
        submit_timeout: float = 60.0,
        addresses: Sequence[str] = (),
        retry_seconds: float = 120.0,
        run_id: str = "",
        on_fit: FitCallback | None = None,
        sandbox: Limits | None = None,
        tls: TlsFiles | None = None,
        cuda: bool = False,
        log_dir: Path | None = None,
        task_deadline: float = 1800.0,
        drain_deadline: float = 1800.0,
        max_result_mb: int = 256,
        log_mb: int = 16,
        shadow: bool = True,
        shadow_lanes: int = 1,
        shadow_shares: bool = True,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self._root = Path(store_root).resolve()
        self._run_id = check_run_id(run_id or uuid.uuid4().hex[:12])
        self._store = UpdateStore(self._root / self._run_id)
        knowledge.save(self._store.root)  # the lanes read the knowledge from the run's store, once each
        self._known = set(knowledge.prior)
        self._rank = {u: i for i, u in enumerate(knowledge.prior)}  # the order the shadow updates are filed in
        self._keys = list(knowledge.keys)
        self._widths: dict[int, int] = {}  # round -> the attack layers' size in its global model (a shadow update's)
        self._decl = declarations
        self._params = params
        self._outputs = Path(outputs)
        self._timeout = submit_timeout
        self._task_deadline = task_deadline
        self._drain_deadline = drain_deadline
        self._max_result = max_result_mb << 20
        self._on_fit = on_fit
        self._on_progress = on_progress
        self._shadow = shadow
        self._shares = shadow_shares
        self._latest_round = 0
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._slots = threading.Semaphore(count)
        self._lanes: dict[str, _Lane] = {}
        self._threads: list[threading.Thread] = []  # every lane thread started (``close`` joins them all)
        self._pending_rounds: dict[int, int] = {}  # round -> lane tasks not yet done
        self._pending_fits = 0
        self._fits_wanted: list[str] = []  # the final fits the last ``fit`` asked for, by name
        self._shadow_lanes: list[_Lane] = []
        self._shadow_rounds: dict[int, _ShadowRound] = {}  # rounds whose shares are not all in yet
        self._shadow_order: deque[int] = deque()  # rounds handed to the shadow lanes, as filed: their hooks follow it
        self._shadow_over: set[int] = set()  # of those, rounds whose shadow part ended (filed or failed)
        self._filed: list[str] = []  # the run's anonymous update ids, as filed
        self._rounds_ready = 0  # rounds whose inputs are filed (their shadow part ended, or none is run) or dropped
        self._interim: list[tuple[int, Fit]] = []  # interim fits, each waiting for the rounds submitted before it
        self.stats = PoolStats()
        logs = log_dir or self._root.parent / f"{self._root.name}-logs"
        if addresses:
            self.hosts: list[Host] = [RemoteHost(a, tls, self._max_result, retry_seconds) for a in addresses]
        else:
            self.hosts = [LocalHost(self._root, logs, sandbox, upstream_root=self._outputs / "upstream-of",
                                    log_cap=log_mb << 20, max_reply=self._max_result, cuda=cuda)]
        self.local = not addresses
        self.sandboxed = all(h.sandboxed for h in self.hosts)
        self.tls = any(getattr(h, "tls", False) for h in self.hosts)
        self.addresses = list(addresses)
        self._writer = threading.Thread(target=self._write_inputs, daemon=True, name="attack-inputs")
        self._writer.start()
        if shadow:  # each lane's process starts with its first round
            for i in range(max(1, min(shadow_lanes, len(self._known)))):
                output = SHADOW if i == 0 else f"{SHADOW}.{i + 1}"
                spec = LaneSpec(key=f"{self._run_id}/{output}", kind="shadow", output=output)
                self._shadow_lanes.append(self._lane(spec, self._run_id))
            self.stats.shadow_lanes = len(self._shadow_lanes)
            self.stats.shadow_split = "shares" if shadow_shares else "rounds"
        for name in params if shadow else ():  # a run's attacks with a per-round hook: their lanes start with it
            if declarations[name].on_round:
                self._lane(self._spec(Fit(name)), self._run_id)

    # --- the inputs (trusted writes) ---------------------------------------------------------

    def depth(self) -> int:
        """Rounds and batches accepted but not yet filed."""
        return self._queue.qsize()

    def lag_rounds(self) -> int:
        with self._lock:
            return self.stats.lag_rounds

    def submit_round(self, snapshot: RoundSnapshot) -> None:
        """Hand over a round's global model; the shadow lane computes the attacker's shadow updates on it."""
        with self._lock:
            self._latest_round = max(self._latest_round, snapshot.round)
            self.stats.rounds_submitted += 1
        if not self._put(("round", snapshot)):
            with self._lock:
                self.stats.rounds_dropped += 1
                self.stats.errors.append(f"round {snapshot.round} dropped: queue full for {self._timeout}s")
                self._lock.notify_all()
            self._inputs_ready(1)
        self._progress()

    def submit_updates(self, updates: list[AnonymousUpdate]) -> None:
        """Tap anonymous updates; never raises, never silently loses one."""
        if not updates:
            return
        with self._lock:
            self.stats.tapped += len(updates)
        if not self._put(("updates", updates)):
            with self._lock:
                self.stats.dropped += len(updates)
                self.stats.errors.append(f"{len(updates)} updates dropped: queue full for {self._timeout}s")
                self._lock.notify_all()

    def _put(self, item: tuple[str, Any]) -> bool:
        try:
            self._queue.put(item, timeout=self._timeout)
        except queue.Full:
            return False
        with self._lock:
            self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.depth())
        return True

    def _write_inputs(self) -> None:
        while not self._stop.is_set():
            try:
                kind, item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                if kind == "updates":
                    self._file_updates(item)
                else:
                    self._file_round(item)
            except Exception as err:  # noqa: BLE001 - a failed write is counted, never lost
                log.exception("filing %s failed", kind)
                with self._lock:
                    self.stats.errors.append(f"filing {kind} failed: {type(err).__name__}: {err}")
                    if kind == "updates":
                        self.stats.failed += len(item)
                    else:
                        self.stats.rounds_analysed += 1
                    self._lock.notify_all()
                if kind != "updates":
                    self._inputs_ready(1)

    def _file_updates(self, updates: list[AnonymousUpdate]) -> None:
        rnd, batch = updates[0].round, uuid.uuid4().hex[:12]
        ids = [u.update_id for u in updates]
        meta = {k: np.asarray([getattr(u, k) for u in updates]) for k in ("norm", "sparsity", "nbytes")}
        vectors = np.stack([u.vector for u in updates])
        self._store.write_anon(rnd, batch, ids, vectors, np.asarray([u.num_examples for u in updates]), meta)
        if updates[0].arrays is not None:
            self._store.write_anon_full(rnd, batch, ids, [u.arrays or {} for u in updates])
        with self._lock:
            self._filed.extend(ids)
            self.stats.analysed += len(updates)
            self._lock.notify_all()
        telemetry.WORKER_UPDATES_STORED.inc(len(updates))

    def _file_round(self, snap: RoundSnapshot) -> None:
        if all(k in snap.arrays for k in self._keys):
            with self._lock:
                self._widths[snap.round] = sum(int(np.asarray(snap.arrays[k]).size) for k in self._keys)
        self._store.write_global(snap.round, snap.arrays)
        self._store.write_config(snap.round, dict(snap.train_config))
        if not self._shadow:
            self._round_tasks(snap.round)
            self._inputs_ready(1)
            return
        n = len(self._shadow_lanes)
        with self._lock:
            self._pending_rounds[snap.round] = self._pending_rounds.get(snap.round, 0) + 1
            self._shadow_order.append(snap.round)
            self._shadow_rounds[snap.round] = _ShadowRound()
            whole = None if self._shares else min(self._shadow_lanes, key=_Lane.load)  # the first of the least loaded
        if whole is not None:
            self._enqueue(whole, _Task("round", round=snap.round, deadline=self._task_deadline))
            return
        for k, lane in enumerate(self._shadow_lanes):
            self._enqueue(lane, _Task("round", round=snap.round, deadline=self._task_deadline, share=(k, n)))

    def _shadow_share(self, task: _Task, part: tuple[list[str], np.ndarray] | None) -> None:
        """A share of round ``task.round`` ended (``part``: its checked labels and vectors; None: it failed). Once every
        share has, the round's shadow updates are filed in the knowledge's order (the order of a lone lane's), or, if
        a share failed, not at all (the hooks still see the round)."""
        with self._lock:
            entry = self._shadow_rounds[task.round]
            entry.ended += 1
            entry.failed = entry.failed or part is None
            if part is not None:
                entry.parts[task.share[0]] = part
            if entry.ended < task.share[1]:
                return
            del self._shadow_rounds[task.round]
        if not entry.failed:
            labels = [u for k in sorted(entry.parts) for u in entry.parts[k][0]]
            vectors = np.concatenate([entry.parts[k][1] for k in sorted(entry.parts)])
            order = sorted(range(len(labels)), key=lambda i: self._rank[labels[i]])  # stable: a share's own order kept
            self._store.write_shadow(task.round, [labels[i] for i in order], vectors[order])
        self._shadow_over_for(task.round)

    def _shadow_over_for(self, rnd: int) -> None:
        """Round ``rnd``'s shadow part ended (its updates filed, or failed): the per-round hooks of every round whose
        shadow part has ended follow, in the order the rounds were filed (a hook never sees a round before an
        earlier one), and each such round's shadow part is done."""
        ready = []
        with self._lock:
            self._shadow_over.add(rnd)
            while self._shadow_order and self._shadow_order[0] in self._shadow_over:
                ready.append(self._shadow_order.popleft())
                self._shadow_over.discard(ready[-1])
        for r in ready:
            self._round_tasks(r)
            self._round_done(r, 0.0)
        self._inputs_ready(len(ready))

    def _inputs_ready(self, rounds: int) -> None:
        """``rounds`` more rounds have their inputs filed (or were dropped): the interim fits waiting for them start."""
        with self._lock:
            self._rounds_ready += rounds
            ready = [job for need, job in self._interim if need <= self._rounds_ready]
            self._interim = [(need, job) for need, job in self._interim if need > self._rounds_ready]
        for job in ready:
            self._enqueue(self._lane(self._spec(job), job.store or self._run_id),
                          _Task("fit", name=job.name, partial=True, deadline=self._deadline_of(job)))

    def _round_tasks(self, rnd: int) -> None:
        """After the round's shadow updates: each attack's per-round hook, in its own lane."""
        hooked = [lane for lane in self._lanes.values() if lane.spec.kind == "attack" and self._decl[lane.spec.attack].on_round
                  and lane.store == self._run_id]
        with self._lock:
            self._pending_rounds[rnd] = self._pending_rounds.get(rnd, 0) + len(hooked)
        for lane in hooked:
            self._enqueue(lane, _Task("round", round=rnd, deadline=self._task_deadline))
        self._round_done(rnd, 0.0, own=False)

    def _round_done(self, rnd: int, seconds: float, own: bool = True) -> None:
        with self._lock:
            left = self._pending_rounds.get(rnd, 0) - (1 if own else 0)
            self.stats.shadow_seconds += seconds
            if left <= 0:
                self._pending_rounds.pop(rnd, None)
                self.stats.rounds_analysed += 1
                self.stats.lag_rounds = self._latest_round - rnd  # how many rounds later the attack side finished it
                self.stats.max_lag_rounds = max(self.stats.max_lag_rounds, self.stats.lag_rounds)
            else:
                self._pending_rounds[rnd] = left
            self._lock.notify_all()
        if left <= 0:
            self._progress()

    # --- lanes -------------------------------------------------------------------------------

    def _spec(self, job: Fit) -> LaneSpec:
        store = job.store or self._run_id
        output = check_run_id(job.output or job.attack)
        decl = self._decl[job.attack]
        params = {**self._params.get(job.attack, decl.params_defaults), **job.params}
        suite = list(self._params)
        upstream = tuple(decl.upstream(suite, self._decl)) if store == self._run_id else ()
        peers = {u: {"params": self._params[u], "score_kind": self._decl[u].score_kind,
                     "builtin": self._decl[u].distribution == BUILTIN} for u in upstream}
        return LaneSpec(key=f"{store}/{output}", kind="attack", attack=job.attack, output=output, params=params,
                        upstream=upstream, peers=peers)

    def _lane(self, spec: LaneSpec, store: str) -> _Lane:
        with self._lock:
            lane = self._lanes.get(spec.key)
            if lane is None:
                host = self.hosts[len(self._lanes) % len(self.hosts)]
                lane = _Lane(spec, store, host)
                self._lanes[spec.key] = lane
            return lane

    def _enqueue(self, lane: _Lane, task: _Task, last: bool = False) -> None:
        """Queue ``task`` on ``lane`` (``last``: the lane ends after it), starting the lane's thread if it has none.

        The queue, the ``last`` mark and the thread are changed under one lock, and a thread that ends leaves its
        lane under that same lock: a task is never queued on a lane whose thread has already decided to end."""
        with self._lock:
            lane.tasks.append(task)
            lane.done = lane.done or last
            if lane.thread is None:
                lane.thread = threading.Thread(target=self._serve, args=(lane,), daemon=True, name=f"lane-{lane.spec.key}")
                self._threads = [t for t in self._threads if t.is_alive()] + [lane.thread]
                lane.thread.start()
            self._lock.notify_all()

    def _serve(self, lane: _Lane) -> None:
        """The lane's thread: its tasks one at a time, at most ``count`` lanes' tasks at once. It starts (and, after
        a death, restarts) the lane's process itself, so the sandbox lives exactly as long as this thread."""
        try:
            while True:
                with self._lock:
                    while not lane.tasks and not lane.done and not self._stop.is_set():
                        self._lock.wait(0.5)
                    if self._stop.is_set() or not lane.tasks:
                        return
                    task = lane.tasks.popleft()
                    lane.running = True
                try:
                    with self._slots:
                        self._run(lane, task)
                finally:
                    with self._lock:
                        lane.running = False
        finally:
            with self._lock:  # the decision to end and leaving the lane are one step (see ``_enqueue``)
                handle, lane.handle, lane.thread = lane.handle, None, None
            if handle is not None:
                handle.stop()

    def _ensure_started(self, lane: _Lane) -> Lane:
        if lane.handle is None:
            handle = lane.host.lane(lane.spec, lane.store)
            handle.start()
            lane.handle = handle
            with self._lock:
                self.stats.lanes_started += 1
                self.stats.lane_start_seconds += handle.start_seconds
            for name in lane.spec.upstream:  # what it builds on, once written
                path = self._output_path(lane.store, name)
                data = self._upstream(lane, name, path) if path.exists() else None
                if data is not None:
                    handle.upstream(name, data)
        return lane.handle

    def _upstream(self, lane: _Lane, name: str, path: Path) -> bytes | None:
        """The outputs of ``name`` that ``lane`` builds on, checked as hostile data (``workers.numbers``): outputs that
        fail are not handed over (the lane runs as without them), and the refusal is ``name``'s, where it happened."""
        data = path.read_bytes()
        try:
            upstream_outputs(data, max_bytes=self._max_result, ranking=self._decl[name].family == "reid")
        except HostileData as err:
            message = f"attack {name!r}'s outputs were not handed to {lane.spec.who}, which builds on them: {err}"
            log.warning("%s", message)
            with self._lock:
                if message not in self.stats.errors:
                    self.stats.errors.append(message)
            return None
        return data

    def _run(self, lane: _Lane, task: _Task) -> None:
        if task.op != "fit":
            self._call(lane, task)
            return
        with self._lock:
            self.stats.fits_running += 1
        self._progress()
        try:
            self._call(lane, task)
        finally:
            with self._lock:
                self.stats.fits_running -= 1
            self._progress()

    def _call(self, lane: _Lane, task: _Task) -> None:
        """One task in its lane (started or restarted as needed), its outputs checked and accepted, or failed."""
        request: dict[str, Any] = {"op": task.op, "round": task.round, "partial": task.partial}
        if lane.spec.kind == "shadow":
            request["share"] = list(task.share)
        given = np.asarray(self._given(lane.store)) if task.op == "fit" else None
        while True:
            try:
                handle = self._ensure_started(lane)
                header, body = handle.call(request, task.deadline)
            except LaneDeadline as err:
                with self._lock:
                    self.stats.deadlines += 1
                self._drop_handle(lane)
                self._failed(lane, task, f"deadline: {err}")
                return
            except TaskFailed as err:
                self._failed(lane, task, f"{lane.spec.who} failed: {err}")
                return
            except LaneBroke as err:  # not a death to retry: a second lane would be sent the same task
                self._drop_handle(lane)
                self._failed(lane, task, f"{task.op} task of {lane.spec.who} failed: {err}")
                return
            except LaneDied as err:
                self._drop_handle(lane)
                if self._stop.is_set():  # ended by ``close``: not restarted, not retried
                    self._failed(lane, task, f"{task.op} task of {lane.spec.who} ended: the pool was closed")
                    return
                self._next_host(lane)
                task.deaths += 1
                with self._lock:
                    self.stats.worker_restarts += 1
                    self.stats.errors.append(f"{lane.spec.who}'s lane died ({err}); restarted")
                if task.deaths >= 2:
                    self._failed(lane, task, f"{task.op} task killed a second lane of {lane.spec.who}: {err}")
                    return
                with self._lock:
                    self.stats.retries += 1
                continue
            except Exception as err:  # noqa: BLE001 - the lane could not start (sandbox, host): the task fails
                self._drop_handle(lane)
                self._failed(lane, task, f"{lane.spec.who}'s lane could not start: {type(err).__name__}: {err}")
                return
            break
        seconds = float(header["seconds"])  # checked against the time the task took (workers.numbers.reply_header)
        try:
            self._accept(lane, task, body, seconds, given)
        except HostileData as err:
            self._failed(lane, task, f"{lane.spec.who}'s outputs refused: {err}")
            return
        with self._lock:
            key = lane.spec.key
            self.stats.tasks_by_worker[key] = self.stats.tasks_by_worker.get(key, 0) + 1
            where = lane.host.where
            self.stats.tasks_by_host[where] = self.stats.tasks_by_host.get(where, 0) + 1
        telemetry.WORKER_TASKS.labels(kind=task.op, outcome="ok").inc()
        telemetry.WORKER_TASK_DURATION.labels(kind=task.op).observe(seconds)

    def _next_host(self, lane: _Lane) -> None:
        """A remote lane that died (or whose worker stopped answering) starts again on the next remote worker."""
        if len(self.hosts) > 1:
            lane.host = self.hosts[(self.hosts.index(lane.host) + 1) % len(self.hosts)]

    def _drop_handle(self, lane: _Lane) -> None:
        if lane.handle is not None:
            lane.handle.stop()
            lane.handle = None

    def _accept(self, lane: _Lane, task: _Task, body: bytes, seconds: float, given: np.ndarray | None) -> None:
        if task.op == "round":
            if lane.spec.kind == "shadow":
                arrays = load_npz(body, max_bytes=self._max_result, schema=SHADOW_SCHEMA, extra=False)
                self._check_shadow(arrays, task.round)
                with self._lock:
                    self.stats.shadow_seconds += seconds
                self._shadow_share(task, ([str(x) for x in arrays["labels"]], arrays["vectors"]))
                return
            self._round_done(task.round, 0.0)
            return
        arrays = load_npz(body, max_bytes=self._max_result)
        self._write_output(lane.store, lane.spec.output, arrays, given)
        with self._lock:
            if task.partial:
                self._pending_fits -= 1
                self.stats.partial_fits += 1
            else:
                self.stats.fit_seconds[task.name] = seconds
            self._lock.notify_all()
        if not task.partial:
            self._hand_downstream(lane)
        if self._on_fit is not None:
            try:
                self._on_fit(task.name, task.partial)
            except Exception:  # a scoring hook must not stop the lane
                log.exception("fit callback for %s failed", task.name)

    def _check_shadow(self, arrays: dict[str, np.ndarray], rnd: int) -> None:
        """Shadow updates for no one the attacker knows, or of another shape than the anonymous ones (the attack layers'
        Δw of the round's global model, flattened), are refused."""
        stray = set(map(str, arrays["labels"])) - self._known
        if stray:
            raise HostileData(f"shadow updates labelled with {len(stray)} identities the attacker does not know")
        with self._lock:
            width = self._widths.get(rnd)
        got = arrays["vectors"].shape[1]
        if width is not None and got != width:
            raise HostileData(f"shadow updates of {got} entries; the attack layers of round {rnd} hold {width}")

    def _output_path(self, store: str, output: str) -> Path:
        return (self._outputs if store == self._run_id else self._outputs / check_run_id(store)) / f"{check_run_id(output)}.npz"

    def _write_output(self, store: str, output: str, arrays: dict[str, np.ndarray], given: np.ndarray | None) -> None:
        """The checked outputs, written by trusted code (atomically), and the ids the fit was given."""
        path = self._output_path(store, output)
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **arrays)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        if given is not None:
            ids = path.with_name(f"{path.stem}.given.npy")
            tmp = ids.with_name(f".{ids.name}.{uuid.uuid4().hex}.tmp")
            with tmp.open("wb") as f:
                np.save(f, np.asarray(given, dtype=str), allow_pickle=False)
            os.replace(tmp, ids)

    def _hand_downstream(self, lane: _Lane) -> None:
        """An attack's final outputs to every running lane that builds on it, read-only."""
        path = self._output_path(lane.store, lane.spec.output)
        for other in list(self._lanes.values()):
            if lane.spec.attack in other.spec.upstream and other.handle is not None:
                data = self._upstream(other, lane.spec.attack, path)
                if data is None:
                    continue
                try:
                    other.handle.upstream(lane.spec.attack, data)
                except LaneDied as err:
                    log.warning("could not hand %s to %s: %s", lane.spec.attack, other.spec.key, err)

    def read_output(self, job: Fit) -> dict[str, np.ndarray]:
        """A fit's outputs as this pool checked and wrote them (trusted data)."""
        with np.load(self._output_path(job.store or self._run_id, job.output or job.attack), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def _given(self, store: str) -> list[str]:
        """The anonymous updates a fit is given: the run's as filed so far, or a study store's."""
        if store == self._run_id:
            with self._lock:
                return list(self._filed)
        return [str(i) for i in UpdateStore(self._root / check_run_id(store)).anon_ids()]

    def _failed(self, lane: _Lane, task: _Task, message: str) -> None:
        log.error("attack task failed: %s", message)
        telemetry.WORKER_TASKS.labels(kind=task.op, outcome="error").inc()
        with self._lock:
            self.stats.errors.append(message)
            if task.op == "fit":
                if task.partial:
                    self._pending_fits -= 1
                else:
                    self.stats.fit_seconds[task.name] = float("nan")
            self._lock.notify_all()
        if task.op == "round":
            if lane.spec.kind == "shadow":
                self._shadow_share(task, None)  # the hooks still see the round, without its shadow updates
                return
            self._round_done(task.round, 0.0)

    # --- public interface --------------------------------------------------------------------

    def score(self, attacks: Sequence[str | Fit]) -> None:
        """Queue an interim fit of each attack on the rounds submitted so far (``on_fit(name, True)`` when done), once
        their inputs are filed: the shadow updates of a round come from the shadow lanes later than its anonymous
        updates, and a fit before them saw none (a measured suite run's re-identification fits failed so)."""
        with self._lock:
            need = self.stats.rounds_submitted
            self._pending_fits += len(attacks)
            self._interim += [(need, Fit(job) if isinstance(job, str) else job) for job in attacks]
        self._inputs_ready(0)

    def _deadline_of(self, job: Fit) -> float:
        """``workers.task_deadline`` [s], or the attack's own budget parameter when it declares one that is shorter (a
        budget never lengthens a task past the run's deadline)."""
        decl = self._decl[job.attack]
        if decl.budget:
            value = {**self._params.get(job.attack, decl.params_defaults), **job.params}.get(decl.budget)
            return task_deadline(value, self._task_deadline)
        return self._task_deadline

    def _settled(self) -> bool:
        s = self.stats
        return (
            s.analysed + s.dropped + s.failed >= s.tapped
            and s.rounds_analysed + s.rounds_dropped >= s.rounds_submitted
            and self._pending_fits <= 0
            and self._queue.empty()
        )

    def drain(self, timeout: float | None = None) -> bool:
        """Wait (at most the drain deadline) until every submitted round, update and interim fit is done or failed;
        what is still pending then is counted failed with 'drain deadline'."""
        limit = self._drain_deadline if timeout is None else timeout
        with self._lock:
            done = self._lock.wait_for(self._settled, timeout=limit)
            if not done:
                self.stats.errors.append(f"the attack side had not caught up {limit:.0f} s after the federation (drain deadline)")
        return done

    def fit(self, attacks: Sequence[str | Fit], timeout: float | None = None) -> None:
        """Fit every attack (a name, or a study's ``Fit`` variant), each in its lane, after the stream is drained; an
        attack that builds on others is fitted once their outputs are written. ``stats.fit_seconds`` is keyed by
        the fit's name (NaN: the fit failed)."""
        self.drain()
        jobs = [Fit(j) if isinstance(j, str) else j for j in attacks]
        with self._lock:
            for job in jobs:
                self.stats.fit_seconds.pop(job.name, None)
            self._fits_wanted = [job.name for job in jobs]
        self._progress()
        waiting = list(jobs)
        limit = time.monotonic() + (timeout if timeout is not None else self._task_deadline * max(1, len(jobs)))
        while waiting:
            with self._lock:
                ready = [j for j in waiting if self._ready(j, jobs)]
            for job in ready:
                waiting.remove(job)
                lane = self._lane(self._spec(job), job.store or self._run_id)
                self._enqueue(lane, _Task("fit", name=job.name, deadline=self._deadline_of(job)), last=True)
            with self._lock:
                if not self._lock.wait_for(lambda: any(self._ready(j, jobs) for j in waiting) or not waiting, timeout=1.0):
                    if time.monotonic() > limit:
                        break
        names = [j.name for j in jobs]
        with self._lock:
            left = max(0.0, limit - time.monotonic())
            self._lock.wait_for(lambda: all(n in self.stats.fit_seconds for n in names), timeout=left)
            for n in names:
                if n not in self.stats.fit_seconds:
                    self.stats.fit_seconds[n] = float("nan")
                    self.stats.errors.append(f"fit of {n} did not finish in time")

    def progress(self) -> dict[str, int]:
        """Where the attack side stands, for a progress display: rounds handed over (``rounds``), analysed or dropped
        (``analysed``), the lag (``lag``: rounds handed over and not yet analysed, now); the final fits asked for
        (``fits``), finished (``fitted``, failed ones included) and fit tasks running (``fitting``, interim ones
        included)."""
        with self._lock:
            s = self.stats
            done = s.rounds_analysed + s.rounds_dropped
            return {"rounds": s.rounds_submitted, "analysed": done, "lag": max(0, s.rounds_submitted - done),
                    "fits": len(self._fits_wanted), "fitted": sum(n in s.fit_seconds for n in self._fits_wanted),
                    "fitting": s.fits_running}

    def _progress(self) -> None:
        """Hand ``progress()`` to ``on_progress`` (never under the pool's lock; its failure never stops a lane)."""
        if self._on_progress is None:
            return
        try:
            self._on_progress(self.progress())
        except Exception:  # a display must not stop the attack side
            log.exception("progress callback failed")

    def _ready(self, job: Fit, jobs: list[Fit]) -> bool:
        """Whether every attack ``job`` builds on (fitted in this batch) has finished, successfully or not."""
        spec = self._spec(job)
        batch = {j.attack: j.name for j in jobs}
        return all(batch[u] in self.stats.fit_seconds for u in spec.upstream if u in batch)

    def close(self) -> None:
        """Stop every lane (its sandbox ends with it) and the writer."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        with self._lock:
            running = [lane.handle for lane in self._lanes.values() if lane.handle is not None and lane.thread is not None]
            threads = list(self._threads)
        for handle in running:
            handle.kill()  # a task in progress ends now; its thread sees the lane end and returns
        for thread in threads:
            thread.join(timeout=30)
        for lane in list(self._lanes.values()):
            if lane.handle is not None:
                lane.handle.stop()
                lane.handle = None
        self._writer.join(timeout=5)
        for host in self.hosts:
            host.close()

