"""One lane on this host, from trusted code's side: an attack of one prior (or the shadow training) in a sandbox of
its own, started, called with a deadline and stopped.

Nothing the lane can write is on the host: it gets its prior's inputs read-only, the outputs of the attacks it
builds on read-only (a folder trusted code fills), and a tmpfs of its own under a quota; it talks through two
pipes (``workers.frames``) and its output goes to a third that trusted code drains into a log of bounded size
(``workers.hostile.LogSink``). Replies are read as hostile data: bounded, before a deadline; a lane past its
deadline is killed. Its texts (errors, last words) are shown as its words (``core.plugin_text.said``), the numbers
of its reply header are checked (``workers.numbers.reply_header``): a header that fails ends the lane and that task.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakbed.core.entry_points import PluginError, distribution_of, select
from leakbed.core.plugin_text import clean, said
from leakbed.workers.frames import FrameClosed, FrameDeadline, FrameError, read_frame, write_frame
from leakbed.workers.hostile import HostileData, LogSink
from leakbed.workers.numbers import reply_header
from leakbed.workers.sandbox import INSIDE, OUTPUT, Limits, Mount, Sandbox, end
from leakbed.workers.staging import ATTACKS, BUILTIN, StagingError

log = logging.getLogger(__name__)
INPUTS = INSIDE / "inputs"
UPSTREAM = INSIDE / "upstream"
OPEN_DEADLINE = 300.0  # [s] a lane that has not opened by then (imports, its knowledge) is ended
EXIT_GRACE = 2.0  # [s] a lane whose pipe closed has exited by then, or it broke off and is ended
SIGNALS = {
    signal.SIGKILL: "SIGKILL: the kernel's OOM killer, a deadline, or a kill",
    signal.SIGSEGV: "SIGSEGV: a crash in native code",
    signal.SIGABRT: "SIGABRT: an abort in native code",
    signal.SIGBUS: "SIGBUS",
    signal.SIGXCPU: "SIGXCPU: over its CPU-time limit",
    signal.SIGXFSZ: "SIGXFSZ: over its file-size limit",
    signal.SIGSYS: "SIGSYS: a refused system call",
}


@functools.lru_cache(maxsize=256)
def code_of(attack: str) -> tuple[str, ...]:
    """The third-party distribution whose staged code a lane of ``attack`` (a name or ``distribution:name``) mounts
    beside leakbed's: none for the shadow lane and leakbed's own attacks (read once per process: a lane starts
    often)."""
    if not attack:
        return ()
    try:
        dist = distribution_of(select(ATTACKS, attack, "attack"))
    except PluginError:  # unknown here: the lane fails to load it, and says so
        return ()
    return () if dist == BUILTIN else (dist,)


def exit_meaning(code: int) -> str:
    """What a lane's exit code says: a signal it died of (negative for a direct child, 128+N through bwrap)."""
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    if number:
        try:
            sig = signal.Signals(number)
        except ValueError:
            return f"signal {number}"
        return SIGNALS.get(sig, sig.name)
    return f"exit code {code}"


class LaneDied(RuntimeError):
    """The lane's process ended during a call (one line: how, and its last words, labelled)."""


class LaneBroke(LaneDied):
    """The lane broke the protocol (a reply that is not a frame, too big, or a header that fails its checks): it was
    ended, and the task fails without a retry (a second lane would be sent the same task)."""


class LaneDeadline(TimeoutError):
    """The lane did not answer before its deadline; it has been killed."""


class TaskFailed(RuntimeError):
    """The attack's hook raised; the lane lives on (one line, labelled as the attack's words)."""


@dataclass(frozen=True)
class LaneSpec:
    """What a lane runs: ``kind`` shadow (the attacker's shadow training) or attack; ``output`` is what its outputs
    are filed under; ``params`` are validated already; ``upstream`` the attacks whose outputs it may read."""

    key: str  # unique on its host: "<store>/<output>"
    kind: str
    attack: str = ""
    output: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    upstream: tuple[str, ...] = ()
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # upstream name -> params, score_kind, builtin

    @property
    def who(self) -> str:
        """How its words are labelled: ``attack 'mlp'``, ``shadow training``."""
        return "the shadow training" if self.kind == "shadow" else f"attack {self.output or self.attack!r}"


class LaneProcess:
    """A started lane over ``inputs`` (its prior's store) and, when it builds on other attacks, ``upstream_dir``."""

    def __init__(
        self,
        spec: LaneSpec,
        inputs: Path,
        *,
        log_path: Path,
        limits: Limits | None,
        upstream_dir: Path | None = None,
        log_cap: int = 16 << 20,
        max_reply: int = 256 << 20,
        cuda: bool = False,
    ) -> None:
        self.spec = spec
        self.inputs = Path(inputs).resolve()
        self.upstream_dir = upstream_dir
        self.limits = limits
        self.log_path = log_path
        self.log_cap = log_cap
        self.max_reply = max_reply
        self.cuda = cuda
        self.proc: subprocess.Popen | None = None
        self._scratch: Path | None = None  # unsandboxed only: the lane's folder on the host
        self._sink: LogSink | None = None
        self._fds: tuple[int, int] = (-1, -1)
        self.start_seconds = 0.0

    @property
    def sandboxed(self) -> bool:
        return self.limits is not None

    # --- life --------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the lane and open it; LaneDied when it cannot."""
        t0 = time.monotonic()
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        r_log, w_log = os.pipe()
        command = [sys.executable, "-m", "leakbed.workers.inside.lane", "--in", str(r_req), "--out", str(w_rep)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.proc = self._spawn(command, (r_req, w_rep), w_log)
        except StagingError as err:
            for fd in (w_req, r_rep, r_log):
                os.close(fd)
            raise LaneDied(f"{self.spec.who} cannot start: {err}") from None
        finally:
            for fd in (r_req, w_rep, w_log):
                os.close(fd)
        self._sink = LogSink(r_log, self.log_path, self.log_cap)
        self._fds = (w_req, r_rep)
        inside = self._paths()
        opening = {"op": "open", "kind": self.spec.kind, "attack": self.spec.attack, "output": self.spec.output,
                   "params": self.spec.params, "peers": self.spec.peers, **inside}
        self._exchange(opening, OPEN_DEADLINE, "open")
        self.start_seconds = time.monotonic() - t0

    def _paths(self) -> dict[str, Any]:
        if self.sandboxed:
            upstream = {n: str(UPSTREAM / f"{n}.npz") for n in self.spec.upstream}
            return {"inputs": str(INPUTS), "folder": str(OUTPUT), "upstream": upstream}
        assert self._scratch is not None
        base = self.upstream_dir or self._scratch
        return {"inputs": str(self.inputs), "folder": str(self._scratch),
                "upstream": {n: str(base / f"{n}.npz") for n in self.spec.upstream}}

    def _spawn(self, command: list[str], fds: tuple[int, int], log_fd: int) -> subprocess.Popen:
        io = {"stdin": subprocess.DEVNULL, "stdout": log_fd, "stderr": log_fd}
        env_extra = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        if self.limits is not None:
            mounts = [Mount(self.inputs, INPUTS)]
            if self.upstream_dir is not None:
                mounts.append(Mount(self.upstream_dir, UPSTREAM))
            box = Sandbox(self.limits, mounts, output=True, cuda=self.cuda, extra_env=env_extra,
                          plugins=code_of(self.spec.attack))
            return box.popen(command, pass_fds=fds, **io)
        self._scratch = Path(tempfile.mkdtemp(prefix="leakbed-lane-"))
        env = {**Sandbox(Limits()).env(plain=True), **env_extra}
        return subprocess.Popen(command, pass_fds=fds, env=env, cwd=self._scratch, close_fds=True,  # type: ignore[call-overload]
                                start_new_session=True, **io)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """End the lane at once: its sandbox's pid 1, so every process of its PID namespace, then bwrap."""
        if self.proc is not None and self.proc.poll() is None:
            end(self.proc)  # the sandbox's pid 1 (and all in it), then bwrap: bwrap's death alone does not reach it
            if self.proc.poll() is None:
                log.error("lane %s (pid %d) did not end after SIGKILL", self.spec.key, self.proc.pid)

    def stop(self, grace: float = 5.0) -> None:
        """Ask the lane to end, then end it; close its pipes and log, remove its host folder (unsandboxed)."""
        w_req, r_rep = self._fds
        if self.proc is not None and self.proc.poll() is None and w_req >= 0:
            try:
                write_frame(w_req, {"op": "stop"})
                self.proc.wait(timeout=grace)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for fd in (w_req, r_rep):
            if fd >= 0:
                os.close(fd)
        self._fds = (-1, -1)
        if self._sink is not None:
            self._sink.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)  # fd-based: never follows a link the lane planted
            self._scratch = None

    def death(self) -> str:
        """How it ended and its last words (labelled as the lane's, bounded), for the pool's errors and the report."""
        code = self.proc.poll() if self.proc is not None else None
        how = "still running" if code is None else exit_meaning(code)
        tail = self._sink.tail() if self._sink is not None else b""
        lines = tail.decode(errors="replace").strip().splitlines()
        fatal = [line for line in lines if line.startswith("Fatal Python error")]
        last = " / ".join(dict.fromkeys([*fatal[-1:], *lines[-1:]]))
        return f"{how}; {said(self.spec.who, last, 'json', 200)}" if last else how

    # --- calls -------------------------------------------------------------------------------

    def call(self, request: dict[str, Any], deadline: float) -> tuple[dict[str, Any], bytes]:
        """Send ``request`` and wait up to ``deadline`` seconds for the reply: (header, body). LaneDeadline (the lane
        is killed), LaneDied, or TaskFailed (the attack's error, labelled)."""
        header, body = self._exchange(request, deadline, str(request.get("op")))
        return header, body

    def _exchange(self, request: dict[str, Any], deadline: float, what: str) -> tuple[dict[str, Any], bytes]:
        w_req, r_rep = self._fds
        until = time.monotonic() + deadline
        try:
            write_frame(w_req, request)
            raw, body = read_frame(r_rep, max_body=self.max_reply, deadline=until)
        except FrameDeadline:
            self.kill()
            raise LaneDeadline(f"{what} task past its deadline of {deadline:.0f} s: {self.spec.who} was ended") from None
        except (FrameClosed, BrokenPipeError) as err:
            # its end of a pipe closed: it is ending (bwrap exits a moment after the sandbox's process) or broke off
            if self._exits_within(EXIT_GRACE):
                self._reap()
                raise LaneDied(self.death()) from None
            self.kill()
            raise LaneDied(f"{self.spec.who} broke the lane protocol ({clean(str(err), 200)}); it was ended") from None
        except (FrameError, OSError) as err:
            if self.alive():  # it wrote garbage or an oversized reply: it cannot be trusted to go on
                self.kill()
                raise LaneBroke(f"{self.spec.who} broke the lane protocol ({clean(str(err), 200)}); it was ended") from None
            self._reap()
            raise LaneDied(self.death()) from None
        try:
            header = reply_header(raw, elapsed=time.monotonic() - (until - deadline))
        except HostileData as err:
            self.kill()
            raise LaneBroke(f"{self.spec.who} sent a malformed reply ({err}); it was ended") from None
        if not header["ok"]:
            raise TaskFailed(said(self.spec.who, header.get("error", ""), "json", 300))
        return header, body

    def _exits_within(self, seconds: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._sink is not None:
            self._sink.close(timeout=2.0)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0


def lane_header(spec: LaneSpec) -> str:
    """The lane's identity for its log's first line (trusted words)."""
    return json.dumps({"lane": spec.key, "kind": spec.kind, "attack": spec.attack, "output": spec.output})
