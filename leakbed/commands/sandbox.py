"""``leakbed sandbox-run`` and ``attack-worker``: the attack side's sandbox from the command line, and a remote
attack worker (``workers.remote``)."""

from __future__ import annotations

import argparse
from typing import Annotated

import click
import typer

from leakbed.commands.options import MemoryMb, choice, flag, text
from leakbed.core.errors import LeakbedError

# the sandbox's defaults are workers.sandbox.Limits' (tests/leakbed/test_cli.py checks them); that module is not
# imported here, so that ``leakbed --help`` stays quick
MEMORY_MB = 8192
PROCESSES = 1024
FILE_SIZE_MB = 16384
SANDBOX_RUN_SETTINGS = {"allow_interspersed_args": False, "ignore_unknown_options": True}  # CMD's own options pass


# sandbox-run
Store = Annotated[
    str,
    text("the store folder, read-only at /leakbed/inputs; the program writes only /leakbed/out (its working directory, "
          "a tmpfs) [path]", "DIR"),
]  # fmt: skip
Command = Annotated[
    list[str] | None,
    typer.Argument(metavar="-- CMD [ARGS...]", help="the program and its arguments, after -- [argv]", show_default=False),
]
Processes = Annotated[int, typer.Option(min=16, max=1 << 20, help="RLIMIT_NPROC of the sandbox user [count]")]
FileSizeMb = Annotated[int, typer.Option(min=1, help="RLIMIT_FSIZE: the largest file it may write [MiB]")]

# attack-worker
WorkerStore = Annotated[str, text("root of the run stores, written by the ServerApp; read-only here [path]", "DIR")]
Port = Annotated[int | None, typer.Option(min=1, max=65535, help="TCP port; this or --socket [port]")]
Socket = Annotated[str | None, text("serve on this Unix socket instead (a container without network) [path]", "PATH")]
Host = Annotated[str, typer.Option(metavar="HOST", help="address to listen on [host]")]
CertFile = Annotated[str | None, text("this worker's certificate (PEM) [path]", "PEM")]
KeyFile = Annotated[str | None, text("its private key (PEM) [path]", "PEM")]
CaFile = Annotated[str | None, text("the run's CA (PEM): only clients with a certificate it signed are served [path]", "PEM")]
Insecure = Annotated[bool, flag("--insecure", "plaintext, no client check: only on a network nobody else joins [flag]")]
Mode = Annotated[str, choice(["auto", "on", "off"], "run each lane sandboxed; auto: where a sandbox can start [mode]")]
LogDir = Annotated[
    str | None, text("the lanes' log folder; none: a new temporary folder, removed when it stops [path]", "DIR")
]
Warm = Annotated[bool, flag("--warm", "accepted for compatibility; lanes warm up on their own [flag]")]


def sandbox_run(
    store: Store,
    command: Command = None,
    memory_mb: MemoryMb = MEMORY_MB,
    processes: Processes = PROCESSES,
    file_size_mb: FileSizeMb = FILE_SIZE_MB,
) -> int:
    """Run a program in exactly the sandbox an attack's lane gets (``--store`` read-only at /leakbed/inputs, a
    writable tmpfs of its own at /leakbed/out, the working directory); its exit code and output pass through."""
    from leakbed.workers import sandbox
    from leakbed.workers.lane import INPUTS

    argv = list(command or [])
    argv = argv[1:] if argv[:1] == ["--"] else argv
    if not argv:
        raise click.UsageError("no command: leakbed sandbox-run --store DIR -- CMD [ARGS...]")
    folder = sandbox.check_store(store)
    if why := sandbox.available():
        raise LeakbedError(f"no sandbox can start here: {why}")
    limits = sandbox.Limits(memory_mb=memory_mb, processes=processes, file_size_mb=file_size_mb)
    proc = sandbox.Sandbox(limits, [sandbox.Mount(folder, INPUTS)]).popen(argv)
    try:
        return proc.wait()
    except BaseException:  # an interrupt: the sandbox and everything in it end with this command
        sandbox.end(proc)
        raise


def attack_worker(
    store: WorkerStore,
    port: Port = None,
    socket: Socket = None,
    host: Host = "127.0.0.1",
    ssl_certfile: CertFile = None,
    ssl_keyfile: KeyFile = None,
    ssl_ca_certfile: CaFile = None,
    insecure: Insecure = False,
    sandbox: Mode = "auto",
    memory_mb: MemoryMb = MEMORY_MB,
    log_dir: LogDir = None,
    warm: Warm = False,
) -> int:
    """``workers.remote.run`` with these options (the namespace its own parser, ``python -m workers.remote``, makes):
    it serves until SIGTERM, SIGINT or SIGHUP, then ends every lane, removes its socket and the temporary folders it
    made, and exits 0, the way a worker ends (a second signal ends the lanes at once, and it exits 128 + its number).
    Its own handlers take over from leakbed's interrupt (``leakbed.interrupts``) once it has checked its options."""
    from leakbed.workers import remote

    if (port is None) == (socket is None):
        raise click.UsageError("give one of --port or --socket" if port is None else "--port and --socket exclude each other")
    return remote.run(argparse.Namespace(
        port=port, socket=socket, store=store, host=host, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
        ssl_ca_certfile=ssl_ca_certfile, insecure=insecure, sandbox=sandbox, memory_mb=memory_mb, log_dir=log_dir,
        warm=warm,
    ))  # fmt: skip
