"""An attack worker: a gRPC AttackService that computes shadow updates, files anonymous updates
and fits attackers, off the FL critical path.

The same service runs where attack code runs: a worker the pool spawns serves it on a Unix socket
inside the sandbox (``attacks.worker_process``); a remote worker (``leakbed attack-worker``,
``attacks.remote``) serves it on TCP behind mutual TLS. It sees only what ``attacks.records`` carries.
Delivery is at-least-once: a batch redelivered after a lost acknowledgement (a worker killed
between writing and replying) is recognised by its update ids and not filed twice, even when
another worker wrote it first, because every worker reads the same store.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from attacks import registry, transport
from attacks.contract import Attack, AttackContext
from attacks.knowledge import AttackerKnowledge
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.shadow import shadow_updates
from attacks.transport import pb, pb_grpc
from core.layout import check_run_id
from core.store import UpdateStore

log = logging.getLogger(__name__)


def context(
    store: UpdateStore, knowledge: AttackerKnowledge, name: str, output: str = "", overrides: dict | None = None
) -> AttackContext:
    """The context of attack ``name``'s hooks: its parameters as the run froze them, with a study's ``overrides``."""
    params = registry.params_of(name, {**knowledge.attack.params.get(name, {}), **(overrides or {})})
    return AttackContext(output or name, store, knowledge, params)


def _handle_round(store: UpdateStore, knowledge: AttackerKnowledge, snap: RoundSnapshot) -> None:
    """The round's global model and the attacker's shadow updates on it, then each attack's round hook."""
    store.write_global(snap.round, snap.arrays)
    labels, vectors = shadow_updates(knowledge, snap)
    store.write_shadow(snap.round, labels, vectors)
    for name in knowledge.attack.suite:
        cls = registry.attack(name)
        if cls.on_round is not Attack.on_round:
            cls().on_round(context(store, knowledge, name), snap)


def _handle_updates(store: UpdateStore, batch: str, updates: list[AnonymousUpdate]) -> None:
    rnd = updates[0].round
    ids = [u.update_id for u in updates]
    meta = {k: np.asarray([getattr(u, k) for u in updates]) for k in ("norm", "sparsity", "nbytes")}
    store.write_anon(
        rnd, batch, ids, np.stack([u.vector for u in updates]), np.asarray([u.num_examples for u in updates]), meta
    )
    if updates[0].arrays is not None:
        store.write_anon_full(rnd, batch, ids, [u.arrays or {} for u in updates])


def _handle_fit(store: UpdateStore, knowledge: AttackerKnowledge, req: pb.FitRequest) -> None:
    """``fit`` then ``predict`` in one task; the outputs are filed under the context's name."""
    overrides = json.loads(req.params_json) if req.params_json else None
    ctx = context(store, knowledge, req.attack, req.output, overrides)
    attack = registry.attack(req.attack)()
    attack.fit(ctx)
    store.write_result(ctx.name, attack.predict(ctx))


@dataclass
class _Run:
    """One FL run's store as this worker sees it; the knowledge is read on first need."""

    store: UpdateStore
    knowledge: AttackerKnowledge | None = None
    filed: set[str] = field(default_factory=set)  # update ids already in the store
    read_files: set[str] = field(default_factory=set)

    def attacker(self) -> AttackerKnowledge:
        if self.knowledge is None:
            self.knowledge = AttackerKnowledge.load(self.store.root)
        return self.knowledge

    def refresh_filed(self) -> None:
        """Add the ids of anonymous-update files written since the last look (by any worker)."""
        for f in sorted((self.store.root / "anon").glob("r*.npz")):
            if f.name not in self.read_files:
                with np.load(f) as z:
                    self.filed.update(str(i) for i in z["ids"])
                self.read_files.add(f.name)


class AttackService(pb_grpc.AttackServiceServicer):
    """Runs one task at a time (a worker is one CPU's worth of attack work); Ping stays responsive."""

    def __init__(self, root: str | Path) -> None:
        self._root = Path(root).resolve()
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Load what torch loads on its first ``torch.func`` transform or optimizer step (torch._dynamo:
        about 1.7 s of CPU) before the first task needs it, holding the task lock so that no task
        imports beside it. Measured: a worker's first batched shadow round took 2.35 s cold and
        0.94 s warm at 100 users, which put the pool 2 rounds behind a fast federation."""
        with self._lock:
            t0 = time.perf_counter()
            import torch._dynamo  # noqa: F401 - the import is the point

            log.info("warmed up in %.1f s", time.perf_counter() - t0)

    def _run(self, msg: pb.Run) -> _Run:
        """The run's store: always ``<root>/<run id>``; a request names no path."""
        run_id = check_run_id(msg.run_id)
        if run_id not in self._runs:
            self._runs[run_id] = _Run(UpdateStore(self._root / run_id))
        return self._runs[run_id]

    def _serve(self, kind: str, work) -> pb.Ack:  # noqa: ANN001 - a closure returning (stored, duplicates)
        with self._lock:
            t0 = time.perf_counter()
            try:
                stored, dups = work()
                error = ""
            except Exception as err:  # a failed task is acknowledged with its error, never lost
                log.exception("%s task failed", kind)
                stored, dups, error = 0, 0, f"worker {os.getpid()}: {type(err).__name__}: {err}"
            seconds = time.perf_counter() - t0
        return pb.Ack(error=error, seconds=seconds, stored=stored, duplicates=dups, worker_pid=os.getpid())

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802 - gRPC method name
        return pb.Ack(worker_pid=os.getpid())

    def Round(self, request: pb.RoundRequest, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802
        def work() -> tuple[int, int]:
            run = self._run(request.run)
            _handle_round(run.store, run.attacker(), transport.snapshot_of(request))
            return 0, 0

        return self._serve("round", work)

    def Updates(self, request: pb.UpdatesRequest, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802
        def work() -> tuple[int, int]:
            run = self._run(request.run)
            run.refresh_filed()
            updates = transport.updates_of(request)
            fresh = [u for u in updates if u.update_id not in run.filed]
            if fresh:
                _handle_updates(run.store, request.batch_id, fresh)
                run.filed.update(u.update_id for u in fresh)
            return len(fresh), len(updates) - len(fresh)

        return self._serve("updates", work)

    def Fit(self, request: pb.FitRequest, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802
        def work() -> tuple[int, int]:
            run = self._run(request.run)
            _handle_fit(run.store, run.attacker(), request)
            return 0, 0

        return self._serve("fit", work)


def serve(
    address: str, store_root: str | Path, *, credentials: grpc.ServerCredentials | None = None, warm: bool = False
) -> grpc.Server:
    """Start the AttackService on ``address`` (``unix:PATH`` or ``host:port``), over ``credentials``
    (``attacks.tls.server_credentials``: mutual TLS) when given, else plaintext. With ``warm``, tasks
    wait until the service has loaded torch's lazy parts (``AttackService.warm``)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=transport.GRPC_OPTIONS)
    service = AttackService(store_root)
    pb_grpc.add_AttackServiceServicer_to_server(service, server)
    bound = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    if warm:  # Ping answers meanwhile, so the pool sees the worker ready and queues its tasks
        threading.Thread(target=service.warm, daemon=True, name="warm").start()
    return server


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(2.0):
        if os.getppid() != parent:  # re-parented: the spawning process has exited
            log.warning("parent process %d is gone; stopping", parent)
            stop.set()


def serve_until_stopped(server: grpc.Server, parent_pid: int = 0) -> None:
    """Block until SIGTERM/SIGINT (or, with ``parent_pid``, until that process is gone), then stop."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if parent_pid:  # a pool killed without closing (SIGKILL, crash) must not leave its workers behind
        threading.Thread(target=_watch_parent, args=(parent_pid, stop), daemon=True).start()
    stop.wait()
    server.stop(grace=5).wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m attacks.worker --socket PATH --store DIR``: the worker a pool spawns (``attacks.worker_process``)."""
    parser = argparse.ArgumentParser(prog="attacks.worker", description="Serve the attack service on a Unix socket.")
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on [path]")
    parser.add_argument("--store", required=True, help="root folder the run stores live under [path]")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process (the pool that spawned it) is gone")
    parser.add_argument("--warm", action="store_true", help="load torch's lazy parts at start (about 1.7 s of CPU)")
    args = parser.parse_args(argv)
    # a worker killed by a fatal signal (SIGSEGV, SIGBUS, SIGABRT...) leaves its Python stack in its log
    faulthandler.enable()
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)  # one BLAS thread per worker: oversubscribed BLAS threads spin and stall the FL clients
    logging.basicConfig(level=logging.INFO, format="%(asctime)s attack-worker %(levelname)s %(message)s")
    Path(args.socket).unlink(missing_ok=True)
    try:
        server = serve(f"unix:{args.socket}", args.store, warm=args.warm)
    except OSError as err:
        print(f"attack-worker: {err}", file=sys.stderr)
        return 2
    log.info("listening on unix:%s (store root %s, uid %d, pid %d)", args.socket, args.store, os.getuid(), os.getpid())
    serve_until_stopped(server, args.parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
