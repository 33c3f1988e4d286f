"""``leakbed attack-worker``: a remote attack worker, reachable by the pool of a run.

Over TCP it answers only clients holding a certificate of the run's CA (mutual TLS, ``workers.tls``), or, with
``--insecure``, anyone who can reach the port; on a Unix socket (``--socket``: a container without network, whose
socket volume only the ServerApp shares) the file system decides who connects. It is a gateway: for each lane the
pool starts (one attack of one prior) it spawns a sandbox on this host over ``<--store>/<run id>`` (read-only: the
ServerApp writes the store, a volume this worker mounts read-only in containers) and forwards the lane's frames
unchanged; attack code never runs in this process. Where no sandbox can start (``--sandbox off``, or a container
that is then the sandbox: non-root, no capabilities, seccomp, read-only, no network) each lane is a process of its
own, unsandboxed within the container. It also answers the pool's introspection of attack plugins, in a sandbox.
SIGTERM, SIGINT or SIGHUP end it in order (every lane at once, then its socket and the temporary folders it made);
its lanes carry its mark (``core.processes.MARK``), so whatever they left is found and ended too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import psutil

from leakbed.core.entry_points import PluginError
from leakbed.core.layout import check_run_id
from leakbed.core.processes import MARK, ProcessGroup, marked
from leakbed.workers import sandbox, transport
from leakbed.workers.hosts import LocalHost, LocalLane
from leakbed.workers.introspect import INSTALL, Introspector, cache_dir
from leakbed.workers.lane import LaneBroke, LaneDeadline, LaneDied, LaneSpec, TaskFailed, code_of
from leakbed.workers.tls import TlsFiles, server_credentials
from leakbed.workers.transport import pb, pb_grpc

log = logging.getLogger(__name__)
MAX_LANES = 256  # lanes one worker holds at once
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RPC_GRACE = 2.0  # [s] the calls in flight when it stops get this long (their lanes are being ended meanwhile)


class Gateway(pb_grpc.LaneServiceServicer):
    """The lane service over a ``LocalHost``: lanes by id, each a sandbox on this host."""

    def __init__(self, host: LocalHost, introspector: Introspector, unconfined: str = "") -> None:
        self._host = host
        self._introspector = introspector
        self._unconfined = unconfined  # why no sandbox can start here (--sandbox auto): third-party lanes are refused
        self._lanes: dict[str, LocalLane] = {}
        self._lock = threading.Lock()
        self._closed = False

    def Ping(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802 - gRPC method name
        return pb.Empty()

    def Start(self, request: pb.LaneStart, context: grpc.ServicerContext) -> pb.LaneRef:  # noqa: N802
        try:
            store = check_run_id(request.run.run_id)
            doc = json.loads(request.spec_json)
            spec = LaneSpec(key=str(doc["key"]), kind=str(doc["kind"]), attack=str(doc.get("attack", "")),
                            output=check_run_id(str(doc.get("output") or doc["kind"])), params=dict(doc.get("params") or {}),
                            upstream=tuple(str(u) for u in doc.get("upstream") or ()),
                            peers={str(k): dict(v) for k, v in (doc.get("peers") or {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # a field of the wrong type, too
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad lane: {err}")
        if self._unconfined and code_of(spec.attack):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"attack {spec.attack!r} comes from a third-party distribution "
                          f"and no sandbox can start on this worker ({self._unconfined}): {INSTALL}")
        with self._lock:
            if len(self._lanes) >= MAX_LANES:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"more than {MAX_LANES} lanes")
        lane = self._host.lane(spec, store)
        try:
            lane.start()
        except (LaneDied, LaneDeadline, TaskFailed, OSError) as err:
            lane.stop()
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the lane could not start: {err}")
        lane_id = uuid.uuid4().hex
        with self._lock:
            closed = self._closed
            if not closed:
                self._lanes[lane_id] = lane
        if closed:  # the worker stopped while this lane started: it ends with the others
            lane.stop()
            context.abort(grpc.StatusCode.UNAVAILABLE, "the attack worker is stopping")
        return pb.LaneRef(lane_id=lane_id, seconds=lane.start_seconds)

    def _lane(self, lane_id: str, context: grpc.ServicerContext) -> LocalLane:
        with self._lock:
            lane = self._lanes.get(lane_id)
        if lane is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such lane")
        return lane  # type: ignore[return-value]

    def Call(self, request: pb.LaneCall, context: grpc.ServicerContext) -> pb.LaneReply:  # noqa: N802
        lane = self._lane(request.lane_id, context)
        try:
            header, body = lane.call(json.loads(request.header_json), max(1.0, request.deadline))
        except LaneDeadline as err:
            return pb.LaneReply(failure="deadline", detail=str(err))
        except LaneBroke as err:  # its task fails without a retry, as on the pool's host
            return pb.LaneReply(failure="broke", detail=str(err))
        except LaneDied as err:
            return pb.LaneReply(failure="died", detail=str(err))
        except TaskFailed as err:
            return pb.LaneReply(failure="task", detail=str(err))
        return pb.LaneReply(header_json=json.dumps(header), body=body)

    def Upstream(self, request: pb.LaneUpstream, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
        self._lane(request.lane_id, context).upstream(check_run_id(request.name), request.npz)
        return pb.Empty()

    def Stop(self, request: pb.LaneRef, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
        with self._lock:
            lane = self._lanes.pop(request.lane_id, None)
        if lane is not None:
            lane.stop()
        return pb.Empty()

    def Declare(self, request: pb.DeclareRequest, context: grpc.ServicerContext) -> pb.DeclareReply:  # noqa: N802
        try:
            found = self._introspector.declarations(list(request.names))
        except PluginError as err:
            failed = {"declarations": {}, "errors": dict.fromkeys(request.names, str(err))}
            return pb.DeclareReply(json=json.dumps(failed).encode())
        doc = {"declarations": {n: d.model_dump(mode="json") for n, d in found.items()}, "errors": {}}
        return pb.DeclareReply(json=json.dumps(doc).encode())

    def close(self) -> None:
        """End every lane, all at once (each is asked to stop, then killed after its grace: a busy lane takes that
        grace, and one after another they would take it each), and refuse lanes from now on."""
        with self._lock:
            self._closed = True
            lanes, self._lanes = list(self._lanes.values()), {}
        stopping = [threading.Thread(target=lane.stop, name=f"stop-{lane.spec.key}", daemon=True) for lane in lanes]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()


class Lanes(ProcessGroup):
    """Every process this worker started (its lanes, each a sandbox or a process of its own, and the introspection's
    sandboxes): its descendants and, where the mark is its own, every process carrying it (one that was re-parented).

    Its lanes inherit the mark of this process's environment (``workers.sandbox.ENV_KEEP``): a launcher's
    (``leakbed deploy-local`` starts workers in its ``ProcessGroup``, which then finds their lanes too), or, where none
    was given, a mark of its own, set here. A launcher's mark is never swept by: it is on the launcher's other
    processes too."""

    def __init__(self) -> None:
        self.own = MARK not in os.environ
        super().__init__(os.environ.get(MARK, ""))
        if self.own:
            os.environ[MARK] = self.mark

    def members(self) -> list[psutil.Process]:
        me = os.getpid()
        found = {p.pid: p for p in psutil.Process(me).children(recursive=True)}
        for pid in marked(MARK, self.mark) if self.own else []:
            if pid not in found and pid != me:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    pass
        return list(found.values())

    def release(self) -> None:
        """Take the mark back out of this process's environment (a worker run inside a test's process)."""
        if self.own and os.environ.get(MARK) == self.mark:
            del os.environ[MARK]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``leakbed attack-worker``."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="TCP port [port]")
    where.add_argument("--socket", help="serve on this Unix socket instead (a container without network) [path]")
    p.add_argument("--store", required=True, help="root of the run stores, written by the ServerApp; read-only here [path]")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on [host]")
    p.add_argument("--ssl-certfile", help="this worker's certificate (PEM) [path]")
    p.add_argument("--ssl-keyfile", help="its private key (PEM) [path]")
    p.add_argument("--ssl-ca-certfile", help="the run's CA (PEM): only clients with a certificate it signed are served [path]")
    p.add_argument("--insecure", action="store_true", help="plaintext, no client check: only on a network nobody else joins")
    p.add_argument("--sandbox", choices=("auto", "on", "off"), default="auto", help="run each lane sandboxed [mode]")
    p.add_argument("--memory-mb", type=int, default=sandbox.Limits.memory_mb, help="sandbox memory limit [MiB]")
    p.add_argument("--log-dir", help="the lanes' log folder (default: a new temporary folder, removed when it stops) [path]")
    p.add_argument("--warm", action="store_true", help="accepted for compatibility; lanes warm up on their own")


def _tls(args: argparse.Namespace) -> TlsFiles | None:
    given = [args.ssl_certfile, args.ssl_keyfile, args.ssl_ca_certfile]
    if args.insecure:
        if any(given):
            raise ValueError("--insecure and --ssl-* exclude each other")
        return None
    if not all(given):
        raise ValueError("give --ssl-certfile, --ssl-keyfile and --ssl-ca-certfile (mutual TLS), or --insecure")
    files = TlsFiles(Path(args.ssl_ca_certfile), Path(args.ssl_certfile), Path(args.ssl_keyfile))
    try:
        files.read()
    except OSError as err:
        raise ValueError(f"cannot read the TLS files: {err}") from None
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakbed attack-worker", description="Serve attack lanes to a pool.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Check the options (one line and exit 2 on a bad one), then serve until SIGTERM, SIGINT or SIGHUP: its lanes
    end, its socket and the temporary folders it made go, and it returns 0 (the way a worker ends)."""
    try:
        if (args.port is not None and not 1 <= args.port <= 65535) or not 64 <= args.memory_mb <= 1 << 20:
            raise ValueError("--port must be 1..65535 and --memory-mb 64..1048576")
        store = sandbox.check_store(args.store)
        tls = _tls(args) if args.socket is None else None  # a Unix socket is this machine's own channel
        why = sandbox.available() if args.sandbox != "off" else "--sandbox off"
        if why and args.sandbox == "on":
            raise ValueError(f"--sandbox on, but no sandbox can start here: {why}")
    except ValueError as err:
        print(f"attack-worker: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s attack-worker %(levelname)s %(message)s")
    limits = None if why else sandbox.Limits(memory_mb=args.memory_mb)
    if why:
        print(f"attack-worker: NOT sandboxed ({why}): each lane is a process of its own, confined only by this host "
              "or container", file=sys.stderr, flush=True)
    lanes = Lanes()
    made: list[Path] = []  # the temporary folders it made: removed when it stops, whatever stops it
    sock = Path(args.socket) if args.socket else None
    server: grpc.Server | None = None
    gateway: Gateway | None = None
    stopped = StopSignals(lambda: (lanes.kill(), _remove(made, sock)))  # a signal from here on ends it in order
    try:
        logs = Path(args.log_dir) if args.log_dir else _temporary("leakbed-worker-logs-", made)
        scratch = _temporary("leakbed-worker-upstream-", made)
        host = LocalHost(store, logs, limits, upstream_root=scratch, log_cap=16 << 20, max_reply=1 << 30)
        cache = cache_dir()
        try:
            cache.mkdir(parents=True, exist_ok=True)
            writable = os.access(cache, os.W_OK)
        except OSError:
            writable = False
        # a container's root is read-only: declarations are then cached beside the lanes' scratch, for this worker's life
        unconfined = why if why and args.sandbox == "auto" else ""  # third-party code is never run unconfined unasked
        gateway = Gateway(host, Introspector(limits, cache=cache if writable else scratch / "declarations",
                                             unconfined=unconfined), unconfined)
        credentials = server_credentials(tls) if tls else None
        if sock is not None:
            sock.unlink(missing_ok=True)
        address = f"unix:{sock}" if sock is not None else f"{args.host}:{args.port}"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=transport.GRPC_OPTIONS)
        pb_grpc.add_LaneServiceServicer_to_server(gateway, server)
        bound = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
        if bound == 0:
            server, sock = None, None  # nothing to stop, and the socket, if any, is not its own
            print(f"attack-worker: cannot listen on {address}", file=sys.stderr)
            return 2
        server.start()
        transport_name = "mutual TLS" if tls else "Unix socket" if sock is not None else "plaintext"
        log.info("listening on %s (%s, %s, store root %s, logs %s)", address, transport_name,
                 "sandboxed lanes" if limits else "unsandboxed lanes", store, logs)
        signum = stopped.wait()  # at once if one came while it started
    finally:  # whatever ends it: a stop signal, an error
        _stop(server, gateway, lanes, made, sock)
    removed = "its socket and temporary folders" if args.socket else "its temporary folders"
    kept = f"; the lanes' logs are in {logs}" if args.log_dir else ""
    log.info("stopped by %s: every lane ended, %s removed%s", signal.Signals(signum).name, removed, kept)
    return 0


def _temporary(prefix: str, made: list[Path]) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    made.append(folder)
    return folder


def _stop(server: grpc.Server | None, gateway: Gateway | None, lanes: Lanes, made: list[Path], sock: Path | None) -> None:
    """End what the worker started: no new calls, every lane at once (the calls in flight get ``RPC_GRACE``), then
    whatever process is left (SIGTERM, a second, SIGKILL); its socket and temporary folders go."""
    stopping = server.stop(grace=RPC_GRACE) if server is not None else None  # new calls are refused from here
    try:
        if gateway is not None:
            gateway.close()
        if stopping is not None:
            stopping.wait(RPC_GRACE + 1)
        lanes.stop(grace=1.0)
    finally:
        lanes.release()
        _remove(made, sock)


def _remove(made: list[Path], sock: Path | None) -> None:
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)
    if sock is not None:
        sock.unlink(missing_ok=True)


class StopSignals:
    """SIGTERM, SIGINT and SIGHUP while it serves: the first ends ``wait`` (the caller then stops in order), a second
    calls ``kill`` (every lane SIGKILLed, its folders removed) and exits at once with 128 + its number. A signal this
    process ignores (``nohup``) stays ignored. Installed over any handler of the caller's (``leakbed``'s interrupt,
    which would raise in the middle of a call instead)."""

    def __init__(self, kill: Callable[[], None]) -> None:
        self._kill = kill
        self._event = threading.Event()
        self._seen: list[int] = []
        for sig in STOP_SIGNALS if threading.current_thread() is threading.main_thread() else ():
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self._handler)

    def _handler(self, signum: int, _frame: object) -> None:
        self._seen.append(signum)
        if len(self._seen) > 1:
            self._kill()
            os._exit(128 + signum)
        self._event.set()

    def wait(self) -> int:
        """Block until the first stop signal; its number."""
        while not self._event.wait(1.0):
            pass
        return self._seen[0]


if __name__ == "__main__":
    sys.exit(main())
