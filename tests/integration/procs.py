"""Process helpers for the integration tests: free ports, logged child processes, tree teardown.

Every process a test starts goes through ``Procs``: its stdout and stderr go to files in the
test's tmp folder (their tails are printed when something fails), and ``stop_all`` ends each one
and every descendant it spawned (SIGTERM, a grace period, then SIGKILL), touching no other process.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # not resolved: the venv's bin, where flwr's entry points live

# The run config every integration test uses: 2 users, 2 rounds, both users sampled each round.
# `set` is split with shlex on the server, so the TOML array's quotes are backslash-escaped:
# flwr keeps them verbatim inside the single-quoted (literal) value and shlex turns `\"` into `"`.
# Unescaped, `split.priors=["random"]` would reach the config as the string "[random]".
OVERRIDES = (
    "data.synthetic.users=2 fl.rounds=2 fl.fraction_train=1.0 attack.workers=1 "
    r"data.synthetic.examples_per_user=40 split.priors=[\"random\"]"
)


def run_config(out_dir: Path, prior: str = "random") -> str:
    """The ``flwr run --run-config`` value: TOML literal strings, so nothing inside is escaped by flwr."""
    for value in (OVERRIDES, str(out_dir), prior):
        assert "'" not in value, f"cannot pass {value!r} as a TOML literal string"
    return f"set='{OVERRIDES}' out-dir='{out_dir}' prior='{prior}'"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (held open together so the kernel cannot hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def flower_env(flwr_home: Path, **extra: str) -> dict[str, str]:
    """Environment for Flower processes: private FLWR_HOME, venv first on PATH, no dependency installs, quiet."""
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(flwr_home),
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "200",
    })
    env.update(extra)
    return env


def write_connection(flwr_home: Path, name: str, body: str) -> Path:
    """``$FLWR_HOME/config.toml`` holding one SuperLink connection ``name`` (the default)."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text(f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\n{body.strip()}\n', encoding="utf-8")
    return path


# --- /proc inspection (Linux) -------------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited already


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        ppid = _ppid(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def find_pids(pattern: str) -> set[int]:
    """PIDs whose command line matches the regex ``pattern`` (never this process)."""
    rx = re.compile(pattern)
    return {pid for pid in all_pids() if pid != os.getpid() and rx.search(_cmdline(pid))}


def terminate(pids: Iterable[int], grace: float = 10.0) -> list[int]:
    """SIGTERM each pid, wait up to ``grace`` seconds, SIGKILL what is left; returns the pids that needed SIGKILL."""
    pids = [p for p in dict.fromkeys(pids) if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    killed = []
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def terminate_tree(root: int, grace: float = 10.0) -> None:
    """End ``root`` and all its descendants (collected before anything is signalled)."""
    terminate([root, *descendants(root)], grace)


# --- logged child processes ---------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    stdout: Path
    stderr: Path


@dataclass
class Procs:
    """The processes one test started; ``stop_all`` ends them and everything they spawned."""

    logdir: Path
    started: list[Proc] = field(default_factory=list)
    extra_pids: set[int] = field(default_factory=set)

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> Proc:
        self.logdir.mkdir(parents=True, exist_ok=True)
        out, err = self.logdir / f"{name}.out", self.logdir / f"{name}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            popen = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env,
                                     cwd=cwd, start_new_session=True)
        proc = Proc(name, argv, popen, out, err)
        self.started.append(proc)
        return proc

    def adopt(self, pids: Iterable[int]) -> None:
        """Also stop these (e.g. a SuperLink that ``flwr`` started detached)."""
        self.extra_pids.update(pids)

    def check_alive(self) -> None:
        """Fail fast when a long-running process died."""
        for p in self.started:
            if p.popen.poll() is not None:
                raise AssertionError(f"{p.name} exited early with code {p.popen.returncode}\n{self.tails()}")

    def stop_all(self, grace: float = 10.0) -> None:
        roots = [p.popen.pid for p in reversed(self.started) if p.popen.poll() is None] + sorted(self.extra_pids)
        pids: list[int] = []
        for root in roots:
            pids += [root, *descendants(root)]
        # A finished process's children were re-parented away from it: they share its session though.
        for p in self.started:
            pids += [pid for pid in all_pids() if _session(pid) == p.popen.pid]
        terminate(pids, grace)
        for p in self.started:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def tails(self, lines: int = 40) -> str:
        parts = []
        for p in self.started:
            for path in (p.stdout, p.stderr):
                parts.append(f"----- {path.name} (last {lines} lines) -----\n{tail(path, lines)}")
        return "\n".join(parts)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(missing)"
    return "\n".join(text.splitlines()[-lines:])


def wait_until(check: Callable[[], bool], timeout: float, what: str, procs: Procs | None = None, interval: float = 0.5) -> None:
    """Poll ``check`` until it is true; fail with the process logs after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs is not None:
            procs.check_alive()
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{procs.tails() if procs else ''}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError):
        return False


def run_logged(procs: Procs, name: str, argv: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> tuple[int, str]:
    """Run a short-lived command as one of ``procs``; returns (exit code, stdout + stderr)."""
    proc = procs.start(name, argv, env, cwd)
    try:
        code = proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{name} did not finish within {timeout:.0f}s\n{procs.tails()}") from None
    return code, proc.stdout.read_text(errors="replace") + proc.stderr.read_text(errors="replace")
