"""Where lanes run: on this host (``LocalHost``: sandboxes spawned here) or on a remote attack worker
(``RemoteHost``: ``leakbed attack-worker``, reached over gRPC with mutual TLS or a Unix socket, which spawns the
same sandboxes on its host and forwards the frames unchanged).

Both give the pool the same lane interface: ``start``, ``call(request, deadline)``, ``upstream`` (hand a lane an
output it builds on), ``stop``, ``death``. What a remote lane sends back is as hostile as a local one's: the pool
checks every reply the same way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

import grpc

from leakbed.core.layout import check_run_id
from leakbed.workers import transport
from leakbed.workers.hostile import HostileData
from leakbed.workers.lane import LaneBroke, LaneDeadline, LaneDied, LaneProcess, LaneSpec, TaskFailed
from leakbed.workers.numbers import reply_header
from leakbed.workers.sandbox import Limits
from leakbed.workers.tls import TlsFiles, channel_credentials
from leakbed.workers.transport import pb, pb_grpc


class Lane(Protocol):
    spec: LaneSpec
    start_seconds: float

    def start(self) -> None: ...

    def call(self, request: dict[str, Any], deadline: float) -> tuple[dict[str, Any], bytes]: ...

    def upstream(self, name: str, data: bytes) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...

    def death(self) -> str: ...

    @property
    def pid(self) -> int: ...


class Host(Protocol):
    where: str  # for the report: "sandboxed here", "remote 10.0.0.5:7070"
    sandboxed: bool

    def lane(self, spec: LaneSpec, store: str) -> Lane: ...

    def close(self) -> None: ...


class LocalLane:
    """A lane on this host: a ``LaneProcess`` and, when it builds on other attacks, the folder holding their outputs."""

    def __init__(self, spec: LaneSpec, inputs: Path, upstream_dir: Path | None, **kw: Any) -> None:
        self.spec = spec
        self._upstream_dir = upstream_dir
        self._proc = LaneProcess(spec, inputs, upstream_dir=upstream_dir, **kw)
        self.start_seconds = 0.0

    def start(self) -> None:
        if self._upstream_dir is not None:
            self._upstream_dir.mkdir(parents=True, exist_ok=True)
        self._proc.start()
        self.start_seconds = self._proc.start_seconds

    def call(self, request: dict[str, Any], deadline: float) -> tuple[dict[str, Any], bytes]:
        return self._proc.call(request, deadline)

    def upstream(self, name: str, data: bytes) -> None:
        """Trusted code writes an upstream output (already checked) where the lane reads it, read-only."""
        if self._upstream_dir is None:
            return
        self._upstream_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._upstream_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(self._upstream_dir / f"{name}.npz")

    def stop(self) -> None:
        self._proc.stop()

    def kill(self) -> None:
        """End its process now, from any thread (its pipes stay open for the thread that calls it)."""
        self._proc.kill()

    def death(self) -> str:
        return self._proc.death()

    @property
    def pid(self) -> int:
        return self._proc.pid


class LocalHost:
    """Lanes spawned on this host, over the stores under ``store_root`` (each lane sees only its own prior's)."""

    def __init__(self, store_root: Path, log_dir: Path, limits: Limits | None, *, upstream_root: Path,
                 log_cap: int, max_reply: int, cuda: bool = False) -> None:
        self.store_root = Path(store_root).resolve()
        self.log_dir = log_dir
        self.limits = limits
        self.upstream_root = upstream_root
        self.sandboxed = limits is not None
        self.where = "sandboxed here" if self.sandboxed else "unsandboxed here"
        self._kw = {"limits": limits, "log_cap": log_cap, "max_reply": max_reply, "cuda": cuda}

    def lane(self, spec: LaneSpec, store: str) -> LocalLane:
        inputs = self.store_root / check_run_id(store)
        upstream = self.upstream_root / check_run_id(store) / check_run_id(spec.output) if spec.upstream else None
        log_path = self.log_dir / f"{check_run_id(store)}-{check_run_id(spec.output or spec.kind)}.log"
        return LocalLane(spec, inputs, upstream, log_path=log_path, **self._kw)

    def close(self) -> None:
        pass


class RemoteLane:
    """A lane on a remote attack worker: frames go through its gateway unchanged."""

    def __init__(self, host: RemoteHost, spec: LaneSpec, store: str) -> None:
        self.spec = spec
        self._host = host
        self._store = store
        self._id = ""
        self.start_seconds = 0.0
        self._last = ""

    def start(self) -> None:
        spec = {"key": self.spec.key, "kind": self.spec.kind, "attack": self.spec.attack, "output": self.spec.output,
                "params": self.spec.params, "upstream": list(self.spec.upstream), "peers": self.spec.peers}
        start = pb.LaneStart(run=transport.run_msg(self._store), spec_json=json.dumps(spec))
        self._host.ready()  # the worker answers within its retry window, or the lane cannot start
        reply = self._host.rpc("Start", start, 600)  # then the lane's start (imports, its knowledge)
        self._id = reply.lane_id
        self.start_seconds = reply.seconds

    def call(self, request: dict[str, Any], deadline: float) -> tuple[dict[str, Any], bytes]:
        msg = pb.LaneCall(lane_id=self._id, header_json=json.dumps(request), deadline=deadline)
        t0 = time.monotonic()
        reply = self._host.rpc("Call", msg, deadline + 30)
        if reply.failure == "deadline":
            raise LaneDeadline(reply.detail)
        if reply.failure in ("died", "broke"):
            self._last = reply.detail
            raise (LaneBroke if reply.failure == "broke" else LaneDied)(reply.detail)
        if reply.failure == "task":
            raise TaskFailed(reply.detail)
        try:
            return reply_header(reply.header_json.encode(), elapsed=time.monotonic() - t0), reply.body
        except HostileData as err:
            raise LaneBroke(f"{self.spec.who} sent a malformed reply through {self._host.address} ({err})") from None

    def upstream(self, name: str, data: bytes) -> None:
        self._host.rpc("Upstream", pb.LaneUpstream(lane_id=self._id, name=name, npz=data), 600)

    def stop(self) -> None:
        if self._id:
            try:
                self._host.rpc("Stop", pb.LaneRef(lane_id=self._id), 60)
            except LaneDied:
                pass

    def kill(self) -> None:
        """Have the worker end the lane now (a call in progress comes back as its death)."""
        self.stop()

    def death(self) -> str:
        return self._last or "the remote lane ended"

    @property
    def pid(self) -> int:
        return 0


class RemoteHost:
    """A remote attack worker at ``address`` (``host:port`` with mutual TLS when ``tls``, or ``unix:/path``)."""

    sandboxed = True  # confined on its own host or container, as its operator set it up

    def __init__(self, address: str, tls: TlsFiles | None, max_reply: int, wait: float = 120.0) -> None:
        self.address = address
        self.wait = wait  # [s] a lane's start waits this long for the worker to answer (it may be restarting)
        over_tcp = not address.startswith("unix:")
        self.tls = tls is not None and over_tcp
        self.where = f"remote {address}"
        options = [*transport.GRPC_OPTIONS, ("grpc.max_receive_message_length", max_reply + (1 << 20))]
        if self.tls and tls is not None:
            self._channel = grpc.secure_channel(address, channel_credentials(tls), options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb_grpc.LaneServiceStub(self._channel)

    def rpc(self, method: str, request: object, timeout: float) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as err:
            raise LaneDied(f"remote attack worker {self.address}: {err.code().name}") from None

    def ready(self) -> None:
        """Wait up to ``wait`` seconds for the worker to answer; LaneDied (one line) if it does not (a call that waits
        for readiness would wait for its whole deadline instead)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.wait)
        except grpc.FutureTimeoutError:
            raise LaneDied(f"remote attack worker {self.address}: not reachable within {self.wait:g} s") from None

    def lane(self, spec: LaneSpec, store: str) -> RemoteLane:
        return RemoteLane(self, spec, store)

    def declare(self, names: list[str], timeout: float) -> bytes:
        """The declarations of ``names``, introspected in a sandbox on the worker's host (raw bounded JSON)."""
        return self.rpc("Declare", pb.DeclareRequest(names=names), timeout).json

    def close(self) -> None:
        self._channel.close()
