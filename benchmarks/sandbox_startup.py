"""How long an attack worker takes from spawn to its first answer, in the sandbox and without it.

``python -m benchmarks.sandbox_startup [--repeats 5] [--warm]`` starts ``workers.worker_process.WorkerProcess``
``--repeats`` times each way (``limits=None``: a plain process on a Unix socket; ``Limits()``: bubblewrap, setpriv,
prlimit, the seccomp filter) and times spawn → first successful Ping over its socket. Prints the settings, a table
(median, min, max seconds) and, as its last line, a JSON summary with the sandboxed/plain ratio of the medians.
Nothing asserts on the times; exit 1 when a worker never answered.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from workers.worker_process import WorkerProcess

from workers import sandbox
from workers.transport import GRPC_OPTIONS, pb, pb_grpc


def first_answer(limits: sandbox.Limits | None, warm: bool, root: Path, timeout: float = 120.0) -> float:
    """Seconds from spawning one worker to its first Ping answer."""
    store = Path(tempfile.mkdtemp(dir=root))
    t0 = time.perf_counter()
    worker = WorkerProcess(0, store, root / f"{store.name}.log", limits, warm=warm)
    try:
        with grpc.insecure_channel(worker.address, options=GRPC_OPTIONS) as channel:  # the pool's 200 ms reconnects
            pb_grpc.AttackServiceStub(channel).Ping(pb.PingRequest(), timeout=timeout, wait_for_ready=True)
        return time.perf_counter() - t0
    finally:
        worker.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.sandbox_startup", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="starts each way (default 5)")
    p.add_argument("--warm", action="store_true", help="workers load torch's lazy parts at start (as a run's pool does)")
    args = p.parse_args(argv)
    if why := sandbox.available():
        print(f"no sandbox here: {why}", file=sys.stderr)
        return 1
    print(f"settings: repeats {args.repeats}, warm {args.warm}, python {sys.executable}")
    times: dict[str, list[float]] = {"plain": [], "sandboxed": []}
    with tempfile.TemporaryDirectory(prefix="leakbed-startup-") as tmp:
        for _ in range(args.repeats):  # interleaved, so drift in the machine's load hits both alike
            for kind, limits in (("plain", None), ("sandboxed", sandbox.Limits())):
                try:
                    times[kind].append(first_answer(limits, args.warm, Path(tmp)))
                except grpc.RpcError as err:
                    print(f"{kind} worker did not answer: {err.code().name}", file=sys.stderr)
                    return 1
    print(f"{'worker':<10} {'median [s]':>11} {'min [s]':>8} {'max [s]':>8}")
    for kind, ts in times.items():
        print(f"{kind:<10} {statistics.median(ts):>11.2f} {min(ts):>8.2f} {max(ts):>8.2f}")
    summary = {k: round(statistics.median(v), 3) for k, v in times.items()}
    summary["ratio"] = round(summary["sandboxed"] / summary["plain"], 3)
    print(json.dumps({"benchmark": "sandbox_startup", "repeats": args.repeats, "warm": args.warm, **summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
