"""``leakbed attack-worker``: a remote attack worker, reachable by the pool of a run.

Over TCP it answers only clients holding a certificate of the run's CA (mutual TLS, ``attacks.tls``),
or, with ``--insecure``, anyone who can reach the port; on a Unix socket (``--socket``: a container
without network, whose socket volume only the ServerApp shares) the file system decides who connects.
The attack code itself runs in a sandboxed worker (``attacks.sandbox``) that has no network at all:
this process is its gateway, forwarding each call, as raw bytes it does not decode, to the worker's
Unix socket, and restarting the worker when it dies. Where no sandbox can start (a container, which
is then the sandbox: non-root, no capabilities, seccomp, read-only, no network) ``--sandbox off``
serves the attack service in this process.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path

import grpc

from attacks import sandbox, transport
from attacks.tls import TlsFiles, server_credentials
from attacks.worker_process import WorkerProcess

log = logging.getLogger(__name__)
SERVICE = "leakbed.attacks.AttackService"
MAX_RESTARTS = 20


class Forward(grpc.GenericRpcHandler):
    """Every AttackService method, forwarded unchanged to ``worker`` behind ``channel``."""

    def __init__(self, channel: grpc.Channel, worker: WorkerProcess) -> None:
        self._channel = channel
        self._worker = worker

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if not method.startswith(f"/{SERVICE}/"):
            return None
        call = self._channel.unary_unary(method)  # no (de)serializers: the request and reply stay bytes

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._worker.adopt_new_runs()
            try:
                return call(request, timeout=context.time_remaining())
            except grpc.RpcError as err:  # the worker died or restarts: the pool redelivers elsewhere
                context.abort(err.code(), f"sandboxed worker: {err.details()}")
                raise  # not reached: abort raises

        return grpc.unary_unary_rpc_method_handler(forward)


def _supervise(worker: WorkerProcess, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        if worker.proc.poll() is not None and worker.restarts < MAX_RESTARTS:
            log.warning("sandboxed worker died (%s); restarting", worker.death())
            worker.restart()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``leakbed attack-worker``."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="TCP port [port]")
    where.add_argument("--socket", help="serve on this Unix socket instead (a container without network) [path]")
    p.add_argument("--store", required=True, help="root folder of the run stores (shared with the ServerApp) [path]")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on [host]")
    p.add_argument("--ssl-certfile", help="this worker's certificate (PEM) [path]")
    p.add_argument("--ssl-keyfile", help="its private key (PEM) [path]")
    p.add_argument("--ssl-ca-certfile", help="the run's CA (PEM): only clients with a certificate it signed are served [path]")
    p.add_argument("--insecure", action="store_true", help="plaintext, no client check: only on a network nobody else joins")
    p.add_argument("--sandbox", choices=("auto", "on", "off"), default="auto", help="run the attack code sandboxed [mode]")
    p.add_argument("--memory-mb", type=int, default=sandbox.Limits.memory_mb, help="sandbox memory limit [MiB]")
    p.add_argument("--log-dir", help="the sandboxed worker's log folder (default: a new temporary folder) [path]")
    p.add_argument("--warm", action="store_true", help="load torch's lazy parts at start, before the first task")


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
    parser = argparse.ArgumentParser(prog="leakbed attack-worker", description="Serve the attack service to a pool over TCP.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Check the options (one line and exit 2 on a bad one), then serve until SIGTERM/SIGINT."""
    from attacks.worker import serve, serve_until_stopped

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
    credentials = server_credentials(tls) if tls else None
    if args.socket:
        Path(args.socket).unlink(missing_ok=True)
    address = f"unix:{args.socket}" if args.socket else f"{args.host}:{args.port}"
    transport_name = "mutual TLS" if tls else "Unix socket" if args.socket else "plaintext"
    if why:
        print(f"attack-worker: NOT sandboxed ({why}): attack code runs in this process", file=sys.stderr, flush=True)
        try:
            server = serve(address, store, credentials=credentials, warm=args.warm)
        except OSError as err:
            print(f"attack-worker: {err}", file=sys.stderr)
            return 2
        log.info("listening on %s (%s, unsandboxed, store root %s)", address, transport_name, store)
        serve_until_stopped(server)
        return 0
    logs = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="leakbed-worker-logs-"))
    worker = WorkerProcess(0, store, logs / "worker.log", sandbox.Limits(memory_mb=args.memory_mb), warm=args.warm)
    channel = grpc.insecure_channel(worker.address, options=transport.GRPC_OPTIONS)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=transport.GRPC_OPTIONS)
    server.add_generic_rpc_handlers((Forward(channel, worker),))
    bound = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    if bound == 0:
        worker.stop()
        print(f"attack-worker: cannot listen on {address}", file=sys.stderr)
        return 2
    server.start()
    stop = threading.Event()
    threading.Thread(target=_supervise, args=(worker, stop), daemon=True, name="supervise").start()
    log.info("listening on %s (%s, sandboxed worker at %s, store root %s, log %s)", address, transport_name,
             worker.address, store, worker.log_path)
    try:
        serve_until_stopped(server)
    finally:
        stop.set()
        channel.close()
        worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
