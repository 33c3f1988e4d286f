"""Process helpers for the integration tests: free ports, logged child processes, tree teardown.

Every process a test starts goes through ``Procs``: its stdout and stderr go to files in the
test's tmp folder (their tails are printed when something fails), and ``stop_all`` ends each one
and every descendant it spawned (SIGTERM, a grace period, then SIGKILL), touching no other process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from leakbed.core.layout import RunLayout
from leakbed.core.processes import alive, all_pids, descendants, terminate
from leakbed.core.processes import free_port as free_port  # re-exported for the tests
from leakbed.core.processes import free_ports as free_ports
from leakbed.core.processes import terminate_tree as terminate_tree

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # not resolved: the venv's bin, where flwr's entry points live

# The run config every integration test uses: 2 users, 2 rounds, both users sampled each round, one ClientApp actor.
# `set` is split on whitespace outside brackets and quotes on the server (core.config.split_overrides),
# so the TOML array passes as written inside the single-quoted (literal) value.
OVERRIDES = (
    "data.synthetic.users=2 fl.rounds=2 fl.fraction_train=1.0 workers.count=1 "
    'data.synthetic.examples_per_user=40 split.priors=["random"] simulation.client_cpus=2'
)


def run_config(out_dir: Path, prior: str = "random") -> str:
    """The ``flwr run --run-config`` value: TOML literal strings, so nothing inside is escaped by flwr."""
    for value in (OVERRIDES, str(out_dir), prior):
        assert "'" not in value, f"cannot pass {value!r} as a TOML literal string"
    return f"set='{OVERRIDES}' out-dir='{out_dir}' prior='{prior}'"


def flower_env(flwr_home: Path, **extra: str) -> dict[str, str]:
    """Environment for Flower processes: private FLWR_HOME, venv first on PATH, no dependency installs, quiet."""
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(flwr_home),
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "COLUMNS": "200",
        }
    )
    env.update(extra)
    return env


def write_connection(flwr_home: Path, name: str, body: str) -> Path:
    """``$FLWR_HOME/config.toml`` holding one SuperLink connection ``name`` (the default)."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text(f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\n{body.strip()}\n', encoding="utf-8")
    return path


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def find_pids(pattern: str) -> set[int]:
    """PIDs whose command line matches the regex ``pattern`` (never this process)."""
    rx = re.compile(pattern)
    return {pid for pid in all_pids() if pid != os.getpid() and rx.search(_cmdline(pid))}


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
            popen = subprocess.Popen(
                argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True
            )
        proc = Proc(name, argv, popen, out, err)
        self.started.append(proc)
        return proc

    def adopt(self, pids: Iterable[int]) -> None:
        """Also stop these (e.g. a SuperLink that ``flwr`` started detached)."""
        self.extra_pids.update(pids)

    def checkalive(self) -> None:
        """Fail fast when a long-running process died."""
        for p in self.started:
            if p.popen.poll() is not None:
                raise AssertionError(f"{p.name} exited early with code {p.popen.returncode}\n{self.tails()}")

    def stop_all(self, grace: float = 10.0) -> None:
        """End every started/adopted process, its descendants, and anything left in their sessions.

        Each process was started in a new session, and some Flower children start their own
        (e.g. the SuperLink's SuperExec); a child whose parent already exited is no longer below
        it, but it is still in that session, so whole sessions are swept too (never this test's).
        """
        roots = [p.popen.pid for p in reversed(self.started)] + sorted(self.extra_pids)
        tree: list[int] = []
        for root in roots:
            if alive(root):
                tree.append(root)
            tree += descendants(root)
        sessions = {sid for sid in map(_session, [*roots, *tree]) if sid is not None} - {_session(0), _session(1)}
        sessions |= set(roots) - {_session(0), _session(1)}  # a root's session id is its pid
        swept = [pid for pid in all_pids() if _session(pid) in sessions]
        terminate([*tree, *swept], grace)
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
            procs.checkalive()
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{procs.tails() if procs else ''}")


RAY_START_SECONDS = 180.0  # a loaded 2-core machine can take a minute per Ray node


def ray_start(procs: Procs, name: str, temp_dir: Path, cpus: float, *args: str) -> None:
    """One real ``ray start --block`` node (its processes end with it): ``cpus`` CPUs, a small object
    store, its own temp dir and agent ports, so other Ray instances on the machine are left alone."""
    agent_http, agent_grpc, runtime_env, metrics = free_ports(4)
    argv = [
        str(VENV_BIN / "ray"),
        "start",
        "--block",
        f"--num-cpus={cpus:g}",
        f"--temp-dir={temp_dir}",
        "--object-store-memory=100000000",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--metrics-export-port={metrics}",
        "--disable-usage-stats",
        *args,
    ]
    procs.start(name, argv, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))


def ray_head(procs: Procs, temp_dir: Path, cpus: float) -> str:
    """A real Ray head on 127.0.0.1 (``ray_start``); returns its GCS address once it answers."""
    from leakbed.cluster import ray_head_problem
    from leakbed.simulate import RAY_LEFT_OUT

    gcs, dash, client = free_ports(3)
    address = f"127.0.0.1:{gcs}"
    head = [f"--port={gcs}", "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--dashboard-port={dash}"]
    # what leakbed's own head leaves out: both monitors (workers' output stays in the node's log files, and no test
    # reads it from a driver's log)
    head += RAY_LEFT_OUT
    ray_start(procs, "ray-head", temp_dir, cpus, "--head", *head, f"--ray-client-server-port={client}")
    wait_until(lambda: ray_head_problem(address) is None, RAY_START_SECONDS, "the Ray head's GCS", procs, interval=1.0)
    return address


def ray_alive_nodes(address: str) -> dict[str, dict]:
    """Node id -> resources of the cluster's living nodes (this process connects, then disconnects)."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        return {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()


def ray_client_actor_nodes(address: str) -> list[str]:
    """The node id of every Flower ClientAppActor the cluster has hosted (dead ones included)."""
    import ray
    from ray._private import state

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        actors = state.actors()
    finally:
        ray.shutdown()
    return [a["Address"]["NodeID"] for a in actors.values() if a["ActorClassName"] == "ClientAppActor"]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError):
        return False


def run_logged(
    procs: Procs, name: str, argv: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None
) -> tuple[int, str]:
    """Run a short-lived command as one of ``procs``; returns (exit code, stdout + stderr)."""
    proc = procs.start(name, argv, env, cwd)
    try:
        code = proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{name} did not finish within {timeout:.0f}s\n{procs.tails()}") from None
    return code, proc.stdout.read_text(errors="replace") + proc.stderr.read_text(errors="replace")


# --- checks on a finished run folder ------------------------------------------------------------

USERS = ("user0", "user1")
ROUNDS = (1, 2)


def check_run_dir(run: Path, prior: str = "random", layout: RunLayout | None = None) -> dict:
    """Assert what a 2-user, 2-round run must leave behind; returns the parsed metrics.json.
    ``layout``: where its stores are when not in the run folder (the volumes of a compose deployment)."""
    layout = layout or RunLayout(run)
    out = layout.results(prior)
    metrics_path = out / "metrics.json"
    listing = sorted(str(p.relative_to(run)) for p in run.rglob("*")) if run.exists() else "nothing"
    assert metrics_path.is_file(), f"no {metrics_path}; the run folder holds {listing}"
    metrics = json.loads(metrics_path.read_text())
    assert metrics["prior"] == prior and metrics["users"] == 2 and metrics["rounds"] == len(ROUNDS), metrics

    # The overrides reached the server intact (the TOML array survived flwr's and shlex's quoting).
    frozen = tomllib.loads((run / "config.toml").read_text())
    assert frozen["split"]["priors"] == [prior], frozen["split"]
    assert frozen["data"]["synthetic"]["users"] == 2 and frozen["data"]["synthetic"]["examples_per_user"] == 40
    assert frozen["fl"]["rounds"] == 2 and frozen["fl"]["fraction_train"] == 1.0 and frozen["workers"]["count"] == 1

    rounds_log = metrics["rounds_log"]
    assert sorted(rounds_log) == [str(r) for r in ROUNDS], rounds_log
    for r in ROUNDS:
        log = rounds_log[str(r)]
        assert log["received"] == 2 and log["failed"] == 0 and log["rejected"] == 0, (r, log)
    pool = metrics["pool"]
    assert pool["tapped"] == pool["analysed"] == 4, pool
    assert pool["dropped"] == pool["failed"] == 0, pool

    # The attack store: exactly 2 anonymous updates per round, opaque ids, unit-norm finite vectors.
    anon_dir = layout.store(prior) / "anon"
    files = sorted(anon_dir.glob("r*.npz"))
    assert files, f"no anonymous updates under {anon_dir}"
    ids, rounds, vectors = [], [], []
    for f in files:
        with np.load(f) as z:
            ids += [str(i) for i in z["ids"]]
            rounds += [int(r) for r in z["round"]]
            vectors.append(z["vectors"])
    assert Counter(rounds) == {r: 2 for r in ROUNDS}, Counter(rounds)
    assert len(set(ids)) == 4, ids
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids), ids
    vecs = np.concatenate(vectors).astype(np.float64)
    assert vecs.shape[0] == 4 and vecs.shape[1] > 0, vecs.shape
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)

    # The referee's sealed truth: those 4 ids, each user once per round.
    truth_rows = [json.loads(line) for line in (layout.referee(prior) / "truth.jsonl").read_text().splitlines() if line.strip()]
    truth = {row["update_id"]: row["user_id"] for row in truth_rows}
    assert set(truth) == set(ids), (sorted(truth), sorted(ids))
    assert Counter(truth.values()) == {u: 2 for u in USERS}, truth
    by_round = {r: sorted(truth[i] for i, rr in zip(ids, rounds, strict=True) if rr == r) for r in ROUNDS}
    assert by_round == {r: list(USERS) for r in ROUNDS}, by_round

    # Ground truth must not leak into the anonymous updates (the shadow/pred files legitimately
    # name the attacker's known identities, so only `anon` is checked). numpy stores str arrays
    # as UTF-32, so look for both encodings and inside every string array.
    for f in anon_dir.rglob("*"):
        if not f.is_file():
            continue
        raw = f.read_bytes()
        for user in USERS:
            assert user not in f.name
            assert user.encode() not in raw and user.encode("utf-32-le") not in raw, f"{user} found in {f}"
        if f.suffix == ".npz":
            with np.load(f) as z:
                for key in z.files:
                    arr = z[key]
                    if arr.dtype.kind in "US":
                        assert not any(u in str(v) for v in arr.ravel() for u in USERS), f"{f}:{key} names a user"
    return metrics


RUN_TIMEOUT = 240.0


def flwr_run(procs: Procs, connection: str, run: Path, env: dict[str, str], extra: Iterable[str] = ()) -> str:
    """``flwr run <repo> <connection> --stream ...`` with the tests' run config; asserts it started and returned 0."""
    cmd = [str(VENV_BIN / "flwr"), "run", str(REPO_ROOT), connection, "--stream", *extra, "--run-config", run_config(run)]
    code, output = run_logged(procs, "flwr-run", cmd, env, RUN_TIMEOUT)
    assert code == 0, f"flwr run exited with {code}\n{output}\n{procs.tails()}"
    assert "Successfully started run" in output, output
    return output


def assert_run_completed(procs: Procs, connection: str, env: dict[str, str]) -> None:
    """The SuperLink's own record: exactly one run, finished and completed (not failed or stopped)."""
    code, listing = run_logged(procs, "flwr-ls", [str(VENV_BIN / "flwr"), "ls", connection, "--format", "json"], env, 60)
    assert code == 0, listing
    runs = json.loads(listing[listing.index("{") :])["runs"]
    assert [r["status"] for r in runs] == ["finished:completed"], runs
