"""``leakbed run`` on Flower's current simulation path: a SuperLink in simulation mode, one ``flwr run`` per prior.

Flower 1.42 runs simulations as runs of a SuperLink started with ``--simulation`` (its Simulation Runtime
starts the ServerApp and one virtual SuperNode per user on Ray); ``run_simulation`` is deprecated. A run
of ``leakbed run`` starts its own such SuperLink, with a private FLWR_HOME, on a free port, submits each
prior with ``flwr run`` as a user would (the app is ``leakbed.apps:server_app`` with ``client.app:app``,
the run config names the frozen config, the prior and the run folder) and stops the SuperLink, and
everything it started, at the end. Progress comes from the file the ServerApp writes after every round.

With ``simulation.ray_address`` set, the SuperLink's Simulation Runtime joins that Ray cluster
(``RAY_ADDRESS``) instead of starting a private Ray; Flower's ``ray.shutdown()`` then only disconnects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from leakbed import flower
from leakbed.apps import PROGRESS_FILE
from leakbed.core.config import ExperimentConfig, dump_config
from leakbed.core.data import federation
from leakbed.core.errors import Failed
from leakbed.core.layout import RunLayout
from leakbed.core.processes import free_port, free_ports
from leakbed.deprecations import reemit
from leakbed.launcher import ProcessLauncher
from leakbed.ray_actors import memory_line

log = logging.getLogger(__name__)

START_ATTEMPTS = 3  # a run that left no results (Ray failed to start) is started again, at most twice
SUPERLINK_START_TIMEOUT = 120.0  # seconds for the SuperLink's HTTP API to answer
RAY_HEAD_START_TIMEOUT = 180.0  # [s] for `ray start --head` to end with the private head up
Progress = Callable[[int, dict[str, float]], None]
# every port a Ray head would take by default (its dashboard's too, though the dashboard is off): a free one each;
# its workers bind random ports (0: no fixed range)
RAY_PORTS = (
    "--node-manager-port", "--object-manager-port", "--metrics-export-port", "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--ray-client-server-port", "--dashboard-port",
)  # fmt: skip
# What a private head leaves out: the autoscaler's monitor (one node, nothing to scale) and the log monitor (it streams
# workers' output to drivers, and every run's driver sets log_to_driver off: ``federation_config``); each a Python
# process of about 1 CPU-s to start and 0.3-0.5 CPU-s a minute polling. Ray's client server cannot be left out
# (`ray start` refuses a port outside 1024-65535 and starts it on 10001 without one).
RAY_LEFT_OUT = ("--no-monitor", "--include-log-monitor=false")


class SimulationFailed(Failed, RuntimeError):
    """Every start of a prior's simulation ended without results (the CLI's one-line error, exit 1)."""


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:  # noqa: S310 - loopback
            return 200 <= r.status < 300
    except OSError:
        return False


def _came_up(ray_start: subprocess.Popen) -> bool:
    """Whether ``ray start --head`` ended with the head up within ``RAY_HEAD_START_TIMEOUT`` (one still starting by
    then has not: the caller stops it with the rest of the link's processes)."""
    try:
        return ray_start.wait(timeout=RAY_HEAD_START_TIMEOUT) == 0
    except subprocess.TimeoutExpired:
        return False


class SimulationLink(ProcessLauncher):
    """The simulation launcher (``leakbed.launcher``): a SuperLink in simulation mode that this process owns, started
    on a free port with a private Flower home, and every process it starts (the SuperExec, the Simulation Runtime, Ray,
    the attack lanes): one ``core.processes.ProcessGroup``, ended by ``stop`` with its temporary folders (its
    processes' ``TMPDIR`` is inside the home).

    ``ray_address``: the runs join that Ray cluster. Else, with ``own_ray``, the link starts one private Ray head
    on free ports (no dashboard, no Ray default port) that every run on it joins (a run then skips Ray's own start
    and stop: about 5 s of wall and 3 CPU-seconds here, per run of a sweep or prior of a run); without, each run
    starts a Ray of its own. The constructor starts the SuperLink (and Ray); ``submit`` runs one ``flwr run`` to its
    end; ``start``, ``wait``, ``logs`` and ``stop`` are ``ProcessLauncher``'s."""

    def __init__(
        self,
        logs: Path,
        ray_address: str = "",
        own_ray: bool = False,
        server_app: str = "leakbed.apps:server_app",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="leakbed-flwr-"))
        self.app = flower.write_app(self.home / "app", server_app)
        tmp = self.home / "tmp"
        tmp.mkdir()
        self.port = free_port()
        logs.mkdir(parents=True, exist_ok=True)
        env = flower.environment(self.home, FLWR_LOG_LEVEL="INFO", TMPDIR=str(tmp), **(extra_env or {}))
        env.pop("RAY_ADDRESS", None)  # a private Ray, unless the config names a cluster
        if ray_address:
            env["RAY_ADDRESS"] = ray_address
        super().__init__(logs, env)
        self.group.folders.append(self.home)  # whatever holds a file in it is the link's (Ray's agents: their logs)
        ray_head = None
        if own_ray and not ray_address:  # started beside the SuperLink: the two start-ups overlap
            ray_head, self.env["RAY_ADDRESS"] = self._start_ray(logs)
        flower.write_home(self.home, "leakbed", f"127.0.0.1:{self.port}")
        try:
            self._start_superlink()
        except (OSError, SimulationFailed):
            self.stop()
            raise
        if ray_head is not None and not _came_up(ray_head):
            # Ray's head failed to come up (it does on a busy machine): each run starts a Ray of its own instead, as
            # without own_ray, and simulate() starts a run again when that fails
            log.warning("the private Ray head did not start (see %s); each run starts its own Ray", logs / "ray-head.log")
            self.stop_processes()
            self.env.pop("RAY_ADDRESS")
            self._start_superlink()

    def _start_superlink(self) -> None:
        """Start the SuperLink with this link's environment and wait for its HTTP API."""
        self.proc = self.start(
            "superlink",
            [flower.script("flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
             "--host", "127.0.0.1", "--port", str(self.port)],
        )  # fmt: skip
        died = lambda: "" if self.proc.poll() is None else f"it exited with code {self.proc.returncode}"  # noqa: E731
        try:
            flower.wait_until(lambda: _healthy(self.port), SUPERLINK_START_TIMEOUT, "the simulation SuperLink", died)
        except flower.NotReady as err:
            raise SimulationFailed(f"{err} (see {self.logs_dir / 'superlink.log'})") from None

    def _start_ray(self, logs: Path) -> tuple[subprocess.Popen, str]:
        """Start a private Ray head for this link's runs (its processes carry the link's mark), every port of it free,
        no dashboard or autoscaler; returns the ``ray start`` process (it exits once the head is up)
        and the head's address."""
        port, *others = free_ports(1 + len(RAY_PORTS))
        cmd = [flower.script("ray"), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.home / 'ray'}",
               f"--num-cpus={os.cpu_count() or 1}", *(f"{flag}={p}" for flag, p in zip(RAY_PORTS, others, strict=True)),
               "--min-worker-port=0", "--max-worker-port=0", *RAY_LEFT_OUT]  # fmt: skip
        return self.start("ray-head", cmd, logs / "ray-head.log"), f"127.0.0.1:{port}"

    def submit(self, run_config: dict[str, str], federation_config: dict[str, object], log_path: Path) -> int:
        """``flwr run`` of leakbed's app with this run and federation config, streaming its log until the run ends."""
        cmd = [flower.script("flwr"), "run", str(self.app), "leakbed", "--stream", "--run-config",
               flower.run_config(run_config), "--federation-config", flower.federation_config(federation_config)]  # fmt: skip
        # its exit code once it ends (an interrupt ends it, and everything else, from ``stop``)
        return self.start(f"flwr-run-{len(self.procs)}", cmd, log_path).wait()

    def stop_processes(self) -> None:
        """End the SuperLink and every process it started, however far they detached: each carries the group's mark
        (Ray's GCS and raylet ignore SIGTERM: a short grace, then SIGKILL)."""
        self.group.stop(self.grace)

    def stop(self, grace: float | None = None) -> None:
        """Stop every process of the link and remove its Flower home (its temporary folders with it)."""
        super().stop(grace)
        shutil.rmtree(self.home, ignore_errors=True)


def simulation_link(cfg: ExperimentConfig, logs: Path) -> SimulationLink:
    """The simulation SuperLink a command submits its runs to (the priors of a run, the points of a sweep), with one
    private Ray head for all of them, or joined to the cluster ``simulation.ray_address`` names."""
    return SimulationLink(logs, cfg.simulation.ray_address, own_ray=not cfg.simulation.ray_address)


def federation_config(cfg: ExperimentConfig, users: int) -> dict[str, object]:
    """Flower's simulation settings: one virtual SuperNode per user, resources per ClientApp actor; a private Ray
    logs quietly (a joined cluster keeps its own settings)."""
    out: dict[str, object] = {
        "num-supernodes": users,
        "client-resources-num-cpus": cfg.simulation.client_cpus,
        "client-resources-num-gpus": cfg.simulation.client_gpus,
    }
    if not cfg.simulation.ray_address:
        out |= {"init-args-logging-level": "ERROR", "init-args-log-to-driver": False}
    return out


REFUSAL = "leakbed: error: "  # how the ServerApp logs a config its preflight refuses (leakbed.apps)
FLOWER_WRAPPERS = ("Simulation Runtime crashed.", "An error was encountered. Ending simulation.")  # not the cause
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Timeout)\w*: (.+)$")


def last_error(log_path: Path) -> tuple[str, bool]:
    """(the run's one-line refusal, True) or (the message of the last exception in its streamed log, False); ''
    when there is none."""
    if not log_path.exists():
        return "", False
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    for line in reversed(lines):
        if REFUSAL in line:
            return line.split(REFUSAL, 1)[1].strip(), True
    for line in reversed(lines):
        found = EXCEPTION_LINE.match(line)
        if found and found.group(1).strip() not in FLOWER_WRAPPERS:
            return found.group(1).strip(), False
    return "", False


def follow(done: Callable[[], bool], progress_file: Path, progress: Progress | None) -> None:
    """Call ``progress(round, {"utility": ...})`` each time the ServerApp's ``progress_file`` changes (round 0: the
    initial model's evaluation), with the attack side's figures as ``attack_<figure>`` values once it has any
    (``AttackPool.progress``), until ``done()``."""
    seen = None
    while not done():
        time.sleep(0.2)
        if progress is None or not progress_file.exists():
            continue
        try:
            state = json.loads(progress_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if state != seen:
            seen = state
            attack = {f"attack_{k}": float(v) for k, v in state.get("attack", {}).items()}
            progress(state["round"], {"utility": state["utility"], **attack})


_SHARED: list[SimulationLink] = []  # a SuperLink every simulate() call uses (``shared_link``)


@contextlib.contextmanager
def shared_link(link: SimulationLink) -> Iterator[SimulationLink]:
    """Submit every ``simulate`` of this process to ``link`` (one SuperLink for many runs: a test session, a
    benchmark), unless a run names a Ray cluster of its own."""
    _SHARED.append(link)
    try:
        yield link
    finally:
        _SHARED.remove(link)


def simulate(
    cfg: ExperimentConfig, rule: str, run_dir: Path, progress: Progress | None = None, link: SimulationLink | None = None
) -> dict:
    """One prior of ``cfg`` through a simulation SuperLink (``link``, the shared one, or one of its own) into the run
    folder ``run_dir`` (see ``core.layout``); returns the prior's ``metrics.json``. The config is frozen into the
    folder first (its plugins' parameters resolved), unless the folder holds it already."""
    import threading

    from leakbed.preflight import resolve

    run_dir.mkdir(parents=True, exist_ok=True)
    layout = RunLayout(run_dir)
    if not layout.config.exists():
        layout.config.write_text(dump_config(resolve(cfg)), encoding="utf-8")
    if link is None and _SHARED and not cfg.simulation.ray_address:
        link = _SHARED[-1]
    users = len(federation(cfg, rule).user_ids)
    path = layout.results(rule) / "metrics.json"
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    run_config = {"config": str(layout.config.resolve()), "prior": rule, "out-dir": str(run_dir.resolve())}
    why = ""
    for attempt in range(START_ATTEMPTS):
        own = link is None
        current = link or SimulationLink(logs, cfg.simulation.ray_address)
        log_path = logs / f"flwr-run-{rule}.log"
        done = threading.Event()
        watcher = threading.Thread(target=follow, args=(done.is_set, layout.results(rule) / PROGRESS_FILE, progress), daemon=True)
        watcher.start()
        try:
            current.submit(run_config, federation_config(cfg, users), log_path)
        finally:
            done.set()
            watcher.join(timeout=5)
            if own:
                current.stop()
        if log_path.exists():
            reemit(log_path.read_text(encoding="utf-8", errors="replace"))
        if path.exists():
            break
        why, refused = last_error(log_path)
        if refused:  # the ServerApp's preflight refused the run: a second start would be refused the same way
            break
        if attempt + 1 == START_ATTEMPTS:
            break
        # Ray's raylet or GCS sometimes fails to come up on a busy 2-core machine; the run is seeded, so a
        # clean second start gives the very same numbers.
        said = memory_line(log_path.read_text(encoding="utf-8", errors="replace")) if log_path.exists() else ""
        log.warning("the %s prior left no results (%s; its log: %s); starting it again from scratch", rule,
                    said or why or "no error in it", log_path)
        for folder in (layout.results(rule), layout.store(rule), layout.referee(rule)):
            shutil.rmtree(folder, ignore_errors=True)
    if not path.exists():
        starts = f"{attempt + 1} start{'s' if attempt else ''}"
        raise SimulationFailed(
            f"the simulation of the {rule} prior ended without results after {starts}"
            + (f": {why}" if why else f" (see {logs / f'flwr-run-{rule}.log'})")
        )
    return json.loads(path.read_text())
