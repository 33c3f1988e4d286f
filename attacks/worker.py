"""An attack worker: a gRPC AttackService that computes shadow updates, files anonymous updates
and fits attackers, off the FL critical path.

The same process serves the simulation (the pool spawns it locally) and deployment
(``leakbed attack-worker --port P --store DIR``). It sees only what ``attacks.records`` carries.
With ``--ssl-certfile``/``--ssl-keyfile`` (the names of Flower's SuperLink flags) it serves over TLS,
and the pool verifies its certificate against ``attack.tls_root_cert``; without them, plaintext
(what the pool's locally spawned workers on 127.0.0.1 use).
Delivery is at-least-once: a batch redelivered after a lost acknowledgement (a worker killed
between writing and replying) is recognised by its update ids and not filed twice, even when
another worker wrote it first, because every worker reads the same store.
"""

from __future__ import annotations

import argparse
import faulthandler
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

from attacks import transport
from attacks.knowledge import AttackerKnowledge
from attacks.records import AnonymousUpdate, RoundSnapshot
from attacks.reidentify import fit_score
from attacks.shadow import shadow_updates
from attacks.suite import run_fit, run_round
from attacks.transport import pb, pb_grpc
from core import telemetry
from core.layout import check_run_id
from core.store import UpdateStore

log = logging.getLogger(__name__)


def _handle_round(store: UpdateStore, knowledge: AttackerKnowledge, snap: RoundSnapshot) -> None:
    store.write_global(snap.round, snap.arrays)
    labels, vectors = shadow_updates(knowledge, snap)
    store.write_shadow(snap.round, labels, vectors)
    run_round(store, knowledge, snap)


def _handle_updates(store: UpdateStore, batch: str, updates: list[AnonymousUpdate]) -> None:
    rnd = updates[0].round
    ids = [u.update_id for u in updates]
    meta = {k: np.asarray([getattr(u, k) for u in updates]) for k in ("norm", "sparsity", "nbytes")}
    store.write_anon(
        rnd, batch, ids, np.stack([u.vector for u in updates]), np.asarray([u.num_examples for u in updates]), meta
    )
    if updates[0].arrays is not None:
        store.write_anon_full(rnd, batch, ids, [u.arrays or {} for u in updates])


def _handle_fit(store: UpdateStore, knowledge: AttackerKnowledge, name: str) -> None:
    if name in knowledge.attack.suite:
        run_fit(store, knowledge, name)
        return
    x_train, y_train, _ = store.read_shadow()
    anon = store.read_anon()
    scores = fit_score(name, knowledge.attack, knowledge.seed, x_train, y_train, anon["vectors"])
    store.write_predictions(name, anon["ids"], anon["round"], scores.classes, scores.scores)


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
                outcome, error = "ok", ""
            except Exception as err:  # a failed task is acknowledged with its error, never lost
                log.exception("%s task failed", kind)
                stored, dups, outcome, error = 0, 0, "error", f"worker {os.getpid()}: {type(err).__name__}: {err}"
            seconds = time.perf_counter() - t0
        telemetry.WORKER_TASKS.labels(kind=kind, outcome=outcome).inc()
        telemetry.WORKER_TASK_DURATION.labels(kind=kind).observe(seconds)
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
            dups = len(updates) - len(fresh)
            telemetry.WORKER_UPDATES_STORED.inc(len(fresh))
            telemetry.WORKER_DUPLICATES.inc(dups)
            return len(fresh), dups

        return self._serve("updates", work)

    def Fit(self, request: pb.FitRequest, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802
        def work() -> tuple[int, int]:
            run = self._run(request.run)
            _handle_fit(run.store, run.attacker(), request.attack)
            return 0, 0

        return self._serve("fit", work)


def read_tls(certfile: str | Path, keyfile: str | Path) -> tuple[bytes, bytes]:
    """``(private key, certificate chain)`` PEM bytes for ``serve(..., tls=...)``; OSError if unreadable."""
    return Path(keyfile).read_bytes(), Path(certfile).read_bytes()


def serve(
    port: int,
    store_root: str | Path,
    host: str = "127.0.0.1",
    metrics_port: int = 0,
    tls: tuple[bytes, bytes] | None = None,
    warm: bool = False,
) -> grpc.Server:
    """Start the AttackService on ``host:port`` (and /metrics on ``metrics_port`` when > 0); over
    TLS when ``tls`` = ``(private key, certificate chain)`` PEM bytes (``read_tls``), else plaintext.
    With ``warm``, tasks wait until the service has loaded torch's lazy parts (``AttackService.warm``)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=transport.GRPC_OPTIONS)
    service = AttackService(store_root)
    pb_grpc.add_AttackServiceServicer_to_server(service, server)
    if tls is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", grpc.ssl_server_credentials([tls]))
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    server.start()
    if warm:  # Ping answers meanwhile, so the pool sees the worker ready and queues its tasks
        threading.Thread(target=service.warm, daemon=True, name="warm").start()
    if metrics_port:
        telemetry.start_http_server(metrics_port, host, registry=telemetry.WORKER_REGISTRY)
    return server


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(2.0):
        if os.getppid() != parent:  # re-parented: the spawning process has exited
            log.warning("parent process %d is gone; stopping", parent)
            stop.set()


def main(argv: list[str] | None = None) -> int:
    """``python -m attacks.worker --port P --store DIR``: serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="leakbed attack-worker", description="Serve the attack service over gRPC.")
    parser.add_argument("--port", type=int, required=True, help="gRPC port [port]")
    parser.add_argument("--store", required=True, help="root folder the run stores live under (shared with the server)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port, 0 = none [port]")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process (the pool that spawned it) is gone")
    parser.add_argument("--ssl-certfile", help="serve over TLS with this certificate (PEM); needs --ssl-keyfile [path]")
    parser.add_argument("--ssl-keyfile", help="private key (PEM) of --ssl-certfile [path]")
    parser.add_argument("--jail", action="store_true", help="run in a jail seeing only --store (attacks/jail.py)")
    parser.add_argument(
        "--warm", action="store_true", help="load torch's lazy parts at start, not in the first task (about 1.7 s of CPU)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535 or not 0 <= args.metrics_port <= 65535:
        parser.exit(2, "attack-worker: --port must be 1..65535 and --metrics-port 0..65535\n")
    root = Path(args.store)
    if not root.is_dir():
        parser.exit(2, f"attack-worker: --store {root}: no such folder\n")
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        parser.exit(2, "attack-worker: give both --ssl-certfile and --ssl-keyfile (TLS) or neither (plaintext)\n")
    tls = None
    if args.ssl_certfile is not None:
        try:
            tls = read_tls(args.ssl_certfile, args.ssl_keyfile)
        except OSError as err:
            parser.exit(2, f"attack-worker: cannot read the TLS certificate or key: {err}\n")
    if args.jail:  # the same worker, re-started inside the jail (it ends when its worker does)
        from attacks import jail

        if why := jail.available():
            parser.exit(2, f"attack-worker: --jail: {why}\n")
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--jail"]
        files = [args.ssl_certfile, args.ssl_keyfile] if tls else []
        command = jail.jailed(["-m", "attacks.worker", *rest], root, files)
        os.execvp(command[0], command)

    # a worker killed by a fatal signal (SIGSEGV, SIGBUS, SIGABRT...) leaves its Python stack in its log: in the
    # jail, unshare only reports "sigprocmask unblock failed" and exit code 1 when its child dies of a signal
    faulthandler.enable()
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)  # one BLAS thread per worker: oversubscribed BLAS threads spin and stall the FL clients
    logging.basicConfig(level=logging.INFO, format="%(asctime)s attack-worker %(levelname)s %(message)s")
    try:
        server = serve(args.port, root, args.host, args.metrics_port, tls, warm=args.warm)
    except OSError as err:
        print(f"attack-worker: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.parent_pid:  # a pool killed without closing (SIGKILL, crash) must not leave its workers behind
        threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()
    log.info(
        "listening on %s:%d (%s, store root %s, pid %d)", args.host, args.port, "TLS" if tls else "plaintext", root, os.getpid()
    )
    stop.wait()
    server.stop(grace=5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
