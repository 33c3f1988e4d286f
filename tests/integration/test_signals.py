"""Stop when told: SIGINT (Ctrl-C), SIGTERM and SIGHUP to a leakbed command end everything it started within 10 s
(its SuperLink, SuperExec, the Simulation Runtime, ``flwr run``, the ClientApp actors, the Ray head, the attack lanes,
its temporary folders), found afterwards by the mark each of them carried (``core.processes.MARK``), however far it
detached. The run folder says where it stopped and keeps what was written; an interrupted sweep resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import grpc
import psutil
import pytest

from leakbed.core.processes import MARK, environment, holding
from leakbed.interrupts import SIGNALS
from leakbed.sweep import BASELINE
from leakbed.workers import transport
from leakbed.workers.remote import STOP_SIGNALS, StopSignals
from leakbed.workers.sandbox import available
from leakbed.workers.transport import pb, pb_grpc
from tests.integration.leftovers import Witness
from tests.integration.procs import VENV_BIN, free_ports
from tests.workers import kit

pytestmark = pytest.mark.slow
TINY = ["data.synthetic.users=6", "data.synthetic.examples_per_user=40", "data.synthetic.image_size=8",
        "fl.fraction_train=0.5", "fl.rounds=400", 'split.priors=["random", "chrono"]', 'attack.suite=["knn"]',
        "workers.count=1", "simulation.client_cpus=2"]  # fmt: skip
STOPPED_WITHIN = 10.0  # [s] the bound
# ports a Ray head takes unless told otherwise: GCS, dashboard, client server, dashboard agent, metrics, runtime env agent
RAY_DEFAULT_PORTS = {6379, 8265, 10001, 52365, 8076, 8080, 61410}


def _marks_below(pid: int, homes: set[Path] | None = None) -> set[str]:
    """The marks carried by the processes below ``pid`` (the groups the command owns); their Flower homes into
    ``homes`` (the temporary folders that must be gone afterwards)."""
    found = set()
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for p in tree:
        if MARK in (env := environment(p.pid)):  # read entry by entry: Ray's agents overwrite the head of theirs
            found.add(env[MARK])
            if homes is not None and "FLWR_HOME" in env:
                homes.add(Path(env["FLWR_HOME"]))
    return found


def _marked(marks: set[str], homes: Iterable[Path] = ()) -> list[str]:
    """Every live process carrying one of ``marks``, or holding a file in one of ``homes`` (the command's Flower
    homes): what the command left behind. Ray's agents retitle themselves (setproctitle), which can overwrite the
    memory /proc/<pid>/environ reads, mark included; their log files are in the home's Ray session folder."""
    holders = {pid for home in homes for pid in holding(home)}  # a deleted file too, once the home is gone
    out = []
    for p in psutil.process_iter():
        try:
            if (environment(p.pid).get(MARK) in marks or p.pid in holders) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _listening(marks: set[str]) -> set[int]:
    """The TCP ports the marked processes listen on."""
    ports = set()
    for p in psutil.process_iter():
        try:
            if environment(p.pid).get(MARK) in marks:
                ports |= {c.laddr.port for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return ports


def _start(argv: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", **(env or {})}
    with log.open("wb") as out:  # the command in a group of its own, as a terminal's foreground job
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def _wait_for(check, timeout: float, what: str, proc: subprocess.Popen, log: Path, run: Path | None = None) -> None:  # noqa: ANN001
    """Wait until ``check()``; on overrunning, say what the command printed and (``run``) where its run stood."""
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"{what}: the command ended first ({proc.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s:\n{log.read_text()[-3000:]}{_state(run)}"
        time.sleep(0.3)


def _state(run: Path | None) -> str:
    """Where a run that overran a wait stood: its progress files and the tail of each log of its processes (the Ray
    head, the SuperLink, ``flwr run``), beyond the command's own progress lines."""
    if run is None:
        return ""
    parts = [f"\n--- {p}: {p.read_text(errors='replace')}" for p in sorted(run.glob("*/progress.json"))]
    parts += [f"\n--- {p}:\n{p.read_text(errors='replace')[-1500:]}" for p in sorted((run / "logs").glob("*.log"))]
    return "".join(parts) or f"\n(nothing in {run} yet)"


def _stop(proc: subprocess.Popen, sig: signal.Signals, to_group: bool = True) -> float:
    """Send ``sig`` (to the command's whole process group, as a terminal does, or to the command alone) and return the
    seconds until the command exited."""
    t0 = time.monotonic()
    if to_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    proc.wait(timeout=60)
    return time.monotonic() - t0


def _mid_round(run: Path, prior: str = "random") -> bool:
    progress = run / prior / "progress.json"
    try:
        return json.loads(progress.read_text())["round"] >= 1
    except (OSError, ValueError, KeyError):
        return False


def _in_session(sid: int) -> list[str]:
    """The live processes of session ``sid`` other than its leader: what a terminal's signal to the command's group
    would reach besides the command."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != sid and os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except (OSError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def test_leakbed_run_stops_everything_it_started(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) mid-round ends everything within 10 s.

    One signal end to end: SIGTERM and SIGHUP (sent to the command alone, as a service manager or a closed terminal
    does) take the very same path. Everything the command started is in a session of its own (asserted here, on the
    live run), so the group's signal reaches the command alone; and in the command each of the three raises the same
    ``Interrupted`` that unwinds the same launchers (``test_every_stop_signal_takes_the_same_path``, below the process
    level, through ``leakbed.cli.main`` for each signal)."""
    sig = signal.SIGINT
    run, log = tmp_path / "run", tmp_path / "cli.log"
    argv = [str(VENV_BIN / "leakbed"), "run", *[a for s in TINY for a in ("--set", s)], "--out", str(run)]
    proc = _start(argv, log)
    marks: set[str] = set()
    homes: set[Path] = set()

    def running() -> bool:  # mid-round, with the command's processes found (by mark)
        marks.update(_marks_below(proc.pid, homes))
        return bool(marks) and _mid_round(run)

    def agents() -> bool:  # Ray's agents up and found (by mark, or by the files they hold in a home)
        marks.update(_marks_below(proc.pid, homes))
        names = " ".join(_marked(marks, homes))
        return "DashboardAgent" in names and "RuntimeEnvAgent" in names

    _wait_for(running, 600, "the first round", proc, log, run)  # 35-60 s here; CI once took over 300 s
    try:
        _wait_for(agents, 60, "Ray's agents", proc, log, run)
    except AssertionError as err:
        raise AssertionError(f"{err}\nthe command's processes: {_marked(marks, homes)}; its homes: {homes}") from None
    before = _marked(marks, homes)
    assert any("raylet" in p for p in before) and any("flower-superlin" in p for p in before), before
    assert not _listening(marks) & RAY_DEFAULT_PORTS  # its private Ray head takes free ports only, and no dashboard
    assert not _in_session(proc.pid), f"in the command's session: {_in_session(proc.pid)}"  # the group: itself alone
    seconds = _stop(proc, sig, to_group=True)
    assert proc.returncode == 128 + sig, log.read_text()[-2000:]
    assert seconds < STOPPED_WITHIN, f"stopped after {seconds:.1f} s"
    left = _marked(marks, homes)
    assert not left, f"left behind: {left}"
    assert homes and not [h for h in homes if h.exists()]  # its Flower home, Ray's session folder and TMPDIR inside
    state = json.loads((run / "interrupted.json").read_text())
    assert state["signal"] == sig.name and state["priors"]["random"]["state"] == "interrupted", state
    assert state["priors"]["random"]["round"] >= 1 and state["priors"]["chrono"]["state"] == "not started", state
    assert (run / "config.toml").exists() and (run / "referee" / "random" / "truth.jsonl").exists()  # kept
    text = log.read_text()
    assert f"interrupted ({sig.name}): the random prior interrupted at round" in text, text[-2000:]


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name.removeprefix("SIG") for s in SIGNALS])
def test_every_stop_signal_takes_the_same_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sig: signal.Signals
) -> None:
    """Below the process level, for each stop signal: ``leakbed run`` (its real CLI, config and preflight; the
    experiment replaced by one that starts a process through a real launcher, writes round 1's progress and is then
    sent the signal) exits 128 + its number, having stopped what the launcher started, records the signal and where
    the run stopped in interrupted.json, says so in one line, and gives the signal's handler back. What differs
    between the signals is their name and number alone, so one end-to-end run
    (``test_leakbed_run_stops_everything_it_started``) stands for the three."""
    assert threading.current_thread() is threading.main_thread()  # else no handler is set, and the signal ends pytest
    from leakbed import cli
    from leakbed.commands import experiment
    from leakbed.launcher import ProcessLauncher

    run = tmp_path / "run"
    started: list[subprocess.Popen] = []

    def interrupted_experiment(cfg: object, run_dir: Path, *_: object, **__: object) -> Path:
        with ProcessLauncher(run_dir / "logs", os.environ) as launcher:
            started.append(launcher.start("sleeper", ["sleep", "600"]))
            (run_dir / "random").mkdir(parents=True)
            (run_dir / "random" / "progress.json").write_text(json.dumps({"round": 1, "utility": 0.5}))
            os.kill(os.getpid(), sig)
            time.sleep(30)  # the handler raises Interrupted here
        raise AssertionError(f"{sig.name} did not interrupt the experiment")

    monkeypatch.setattr(experiment, "run_experiment", interrupted_experiment)
    before = signal.getsignal(sig)
    code = cli.main(["run", *[a for s in TINY for a in ("--set", s)], "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 128 + sig, err
    assert started and started[0].poll() is not None, "the launcher's process was not stopped"
    state = json.loads((run / "interrupted.json").read_text())
    assert state["signal"] == sig.name and state["priors"]["random"]["state"] == "interrupted", state
    assert state["priors"]["random"]["round"] == 1 and state["priors"]["chrono"]["state"] == "not started", state
    assert f"interrupted ({sig.name}): the random prior interrupted at round 1 of 400" in err, err
    assert f"leakbed: stopped by {sig.name}: every process it started has ended" in err, err
    assert signal.getsignal(sig) == before


def test_a_second_interrupt_ends_at_once(tmp_path: Path) -> None:
    run, log = tmp_path / "run", tmp_path / "cli.log"
    argv = [str(VENV_BIN / "leakbed"), "run", *[a for s in TINY for a in ("--set", s)], "--out", str(run)]
    proc = _start(argv, log)
    marks: set[str] = set()
    _wait_for(lambda: bool(marks.update(_marks_below(proc.pid)) or marks) and _mid_round(run), 600, "round 1", proc, log, run)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert time.monotonic() - t0 < 5.0 and proc.returncode == 130, log.read_text()[-2000:]
    deadline = time.monotonic() + 5
    while _marked(marks) and time.monotonic() < deadline:  # SIGKILLed: gone as soon as the kernel reaps them
        time.sleep(0.2)
    assert not _marked(marks)


# The sweep's grid: rand-aug at 0 beside noise and dropout at 0, so its one point runs every defense at parameter 0,
# which must give the undefended baseline's numbers exactly
SWEEP_DEFENSES = 'defenses=[{name="rand-aug"}, {name="noise", variance=0.0}, {name="dropout", p=0.0}]'


def test_an_interrupted_sweep_resumes_where_it_stopped_and_reports(tmp_path: Path) -> None:
    """Ctrl-C mid-sweep keeps the finished points; the same command resumes, runs only the rest, writes the
    trade-off (where defenses at parameter 0 reproduce the baseline exactly) and leaves nothing running; once
    complete it reruns nothing, and another grid into the same folder is refused in one line (exit 2).

    As small as that allows: two points (the baseline, finished before the interrupt, and the grid's one point at
    parameter 0, interrupted and then resumed) of three rounds (after two the baseline's utility is still 0, which
    normalises nothing); a grid's points and their order are ``tests/leakbed/test_sweep.py``'s, below the process
    level."""
    out, log = tmp_path / "sweep", tmp_path / "cli.log"
    sets = [s for s in TINY if not s.startswith(("fl.rounds", "split.priors"))] + ["fl.rounds=3", 'split.priors=["random"]']
    argv = [str(VENV_BIN / "leakbed"), "sweep", "--set", SWEEP_DEFENSES, "--grid", "defenses.0.alpha=0",
            *[a for s in sets for a in ("--set", s)], "--out", str(out)]  # fmt: skip
    proc = _start(argv, log)
    points: list[Path] = []

    def second_point_started() -> bool:
        points[:] = sorted(p for p in out.glob("*") if p.is_dir() and p.name != "logs")
        done = [p for p in points if (p / "metrics.json").exists()]
        return len(done) >= 1 and any((p / "random").exists() and not (p / "metrics.json").exists() for p in points)

    _wait_for(second_point_started, 600, "the second point", proc, log)
    assert _stop(proc, signal.SIGINT) < STOPPED_WITHIN and proc.returncode == 130
    finished = [p.name for p in points if (p / "metrics.json").exists()]
    total = len(json.loads((out / "sweep.json").read_text())["points"])  # the baseline and the grid's one
    assert total == 2 and finished == [BASELINE]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    with Witness() as witness:  # the resumed sweep runs to its end, and then leaves nothing
        again = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=witness.env(env))
        assert again.returncode == 0, again.stderr[-2000:]
        witness.check()  # no process (SuperLink, Ray head and its agents, lanes), no temporary folder, no socket
    reused = len(finished)
    assert f"ran {total - reused} of {total} points ({reused} reused)" in again.stdout, again.stdout
    names = json.loads((out / "sweep.json").read_text())["points"]
    assert all((out / name / "metrics.json").exists() for name in names)

    rows = json.loads((out / "tradeoff.json").read_text())
    assert [r["point"] for r in rows] == [BASELINE, "defenses.0.alpha=0"]
    assert rows[0]["utility_norm"] == 1.0 and (out / "tradeoff.png").stat().st_size > 10_000
    base, off = (json.loads((out / n / "random" / "metrics.json").read_text()) for n in (BASELINE, "defenses.0.alpha=0"))
    assert len(off["defenses"]) == 3 and not base["defenses"]  # the three defenses ran, at parameter 0 ...
    assert sorted(off["attackers"]) == sorted(base["attackers"]) == ["knn"]
    for name, attacker in base["attackers"].items():  # ... and every number is the baseline's (groups aside)
        assert attacker["per_round"], name
        assert {k: v for k, v in off["attackers"][name].items() if k != "groups"} == {
            k: v for k, v in attacker.items() if k != "groups"
        }, name
    assert off["utility"] == base["utility"]

    stamp = (out / "defenses.0.alpha=0" / "metrics.json").stat().st_mtime_ns
    complete = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert complete.returncode == 0 and "ran 0 of 2 points (2 reused)" in complete.stdout, complete.stdout[-2000:]
    assert (out / "defenses.0.alpha=0" / "metrics.json").stat().st_mtime_ns == stamp
    other = subprocess.run([*argv, "--grid", "fl.lr=0.2"], capture_output=True, text=True, timeout=300, env=env)
    assert other.returncode == 2 and "different sweep" in other.stderr, other.stderr[-2000:]


def test_leakbed_deploy_local_stops_everything_it_started(tmp_path: Path) -> None:
    out, log = tmp_path / "dep", tmp_path / "cli.log"
    (metrics,) = free_ports(1)
    sets = [s for s in TINY if not s.startswith(("split.priors", "data.synthetic.users"))]
    sets += ['split.priors=["random"]', "data.synthetic.users=3"]
    argv = [str(VENV_BIN / "leakbed"), "deploy-local", *[a for s in sets for a in ("--set", s)], "--out", str(out),
            "--workers", "1", "--metrics-port", str(metrics)]  # fmt: skip
    proc = _start(argv, log)
    marks: set[str] = set()

    def running() -> bool:
        marks.update(_marks_below(proc.pid))
        return _mid_round(out / "run") and len(_marked(marks)) >= 5

    _wait_for(running, 420, "the first round", proc, log, out / "run")
    seconds = _stop(proc, signal.SIGTERM, to_group=False)
    assert proc.returncode == 128 + signal.SIGTERM and seconds < STOPPED_WITHIN, (seconds, log.read_text()[-2000:])
    assert not _marked(marks), _marked(marks)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_sandbox_run_ends_its_sandbox(tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "cli.log"
    proc = _start([str(VENV_BIN / "leakbed"), "sandbox-run", "--store", str(tmp_path), "--",
                   sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"], log)  # fmt: skip
    _wait_for(lambda: "up" in log.read_text(), 60, "the sandboxed program", proc, log)
    inside = [p for p in psutil.Process(proc.pid).children(recursive=True) if "time.sleep(600)" in " ".join(p.cmdline())]
    assert inside
    assert _stop(proc, sig, to_group=False) < STOPPED_WITHIN and proc.returncode == 128 + sig
    assert not [p for p in inside if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _lane(stub: pb_grpc.LaneServiceStub, output: str) -> pb.LaneRef:
    """Have the worker start one lane (knn over the store ``r``), as a pool's ``RemoteLane.start`` does."""
    doc = {"key": f"r/{output}", "kind": "attack", "attack": "knn", "output": output, "params": {"k": 3}}
    return stub.Start(pb.LaneStart(run=transport.run_msg("r"), spec_json=json.dumps(doc)), timeout=120)


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=[s.name.removeprefix("SIG") for s in STOP_SIGNALS])
def test_attack_worker_stop_signals_take_one_path(sig: signal.Signals) -> None:
    """Below the process level: the attack worker's handler (``workers.remote.StopSignals``) ends its wait on each
    stop signal, and says which, so the worker then stops in the one order the end-to-end runs below check (SIGINT to
    its group, SIGTERM to it alone); SIGHUP, the third, needs no run of its own. A signal the process ignores (a
    worker started under ``nohup``, as this suite may be) stays ignored: each case sets the disposition it starts
    from, so the test neither depends on how pytest was started nor waits for a signal that never comes."""
    assert threading.current_thread() is threading.main_thread()  # else no handler is set, and the signal ends pytest
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    killed: list[bool] = []
    try:
        signal.signal(sig, signal.SIG_IGN)
        StopSignals(lambda: killed.append(True))
        assert signal.getsignal(sig) is signal.SIG_IGN  # ignored before, ignored after
        signal.signal(sig, signal.SIG_DFL)
        stopped = StopSignals(lambda: killed.append(True))
        assert signal.getsignal(sig) == stopped._handler  # installed: the signal below cannot end pytest
        os.kill(os.getpid(), sig)
        assert stopped.wait() == sig and not killed  # the first signal: an orderly stop, nothing killed
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@pytest.mark.parametrize(
    ("sig", "to_group", "where", "mode"),
    [(signal.SIGINT, True, "socket", "auto"), (signal.SIGTERM, False, "port", "off")],
    ids=["INT", "TERM-unsandboxed"],
)  # fmt: skip
def test_attack_worker_ends_its_lanes_socket_and_folders(
    tmp_path: Path, sig: signal.Signals, to_group: bool, where: str, mode: str
) -> None:
    """``leakbed attack-worker`` serving two lanes (each a sandbox, or with ``--sandbox off`` a process with a
    scratch folder of its own), both busy (frozen, so neither answers its stop frame): a stop signal ends both lanes
    at once, removes its socket and the temporary folders it made
    (its default log folder, the lanes' upstream scratch), frees its port, and exits 0: a stop signal is how a worker
    ends (its other tests, and service managers, read 0 as a clean stop)."""
    if mode == "auto" and (why := available()):
        pytest.skip(f"no sandbox here: {why}")
    store, tmp, log = tmp_path / "store", tmp_path / "tmp", tmp_path / "cli.log"
    kit.fill_store(store / "r")
    tmp.mkdir()  # its TMPDIR: whatever temporary folder it makes is in here, and must be gone afterwards
    sock_dir = Path(tempfile.mkdtemp(prefix="lkw-", dir="/tmp"))  # a socket path must fit 107 bytes
    sock = sock_dir / "w.sock"
    (port,) = free_ports(1)
    place = ["--socket", str(sock)] if where == "socket" else ["--port", str(port)]
    argv = [str(VENV_BIN / "leakbed"), "attack-worker", "--store", str(store), "--insecure", "--sandbox", mode, *place]
    proc = _start(argv, log, env={"TMPDIR": str(tmp)})
    address = f"unix:{sock}" if where == "socket" else f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    marks: set[str] = set()
    try:
        _wait_for(lambda: "listening on" in log.read_text(), 60, "the worker's listening line", proc, log)
        stub = pb_grpc.LaneServiceStub(channel)
        assert all(_lane(stub, name).lane_id for name in ("knn", "knn2"))
        marks = _marks_below(proc.pid)
        below = psutil.Process(proc.pid).children(recursive=True)
        lanes = [p for p in below if "leakbed.workers.inside.lane" in " ".join(p.cmdline())]
        assert len(lanes) >= 2 and marks, (lanes, marks)  # the lanes carry the worker's mark
        for lane in lanes:  # each lane frozen mid-task: deaf to the stop frame, it is killed after its grace
            if lane.name() != "bwrap":
                lane.suspend()
        made = sorted(p.name for p in tmp.iterdir())
        assert any(n.startswith("leakbed-worker-") for n in made), made
        if mode == "off":
            assert sum(n.startswith("leakbed-lane-") for n in made) == 2, made
        seconds = _stop(proc, sig, to_group)
        socket_left = sock.exists()
    finally:
        channel.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = _marked(marks)
        for pid in left:  # never leave them running, whatever the assertions below say
            os.kill(int(pid.split()[0]), signal.SIGKILL)
        shutil.rmtree(sock_dir, ignore_errors=True)
    text = log.read_text()
    print(f"\n[signals] attack-worker {sig.name} ({where}, sandbox {mode}): stopped in {seconds:.2f} s")
    assert proc.returncode == 0, (proc.returncode, text[-2000:])
    assert seconds < STOPPED_WITHIN, f"stopped after {seconds:.1f} s"
    assert not left, f"left behind: {left}"
    assert not [p for p in lanes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not socket_left, f"its socket {sock} is still there"
    assert not list(tmp.iterdir()), f"temporary folders left: {sorted(p.name for p in tmp.iterdir())}"
    assert not _listening(marks)
    with socket.socket() as s:  # nothing listens on its port any more
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert f"stopped by {sig.name}: every lane ended, its " in text, text[-2000:]
