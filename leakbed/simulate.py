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
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from core.config import ExperimentConfig, dump_config
from core.data import federation
from core.layout import RunLayout
from core.processes import descendants, free_port, marked, terminate
from leakbed.apps import PROGRESS_FILE
from leakbed.deprecations import reemit

log = logging.getLogger(__name__)

START_ATTEMPTS = 3  # a run that left no results (Ray failed to start) is started again, at most twice
SUPERLINK_START_TIMEOUT = 120.0  # seconds for the SuperLink's HTTP API to answer
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when a link stops
# The Flower app ``flwr run`` submits: leakbed's ServerApp and ClientApp, imported from the installed packages
# (so the FAB is this one file), with the run config keys the ServerApp reads.
APP_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "leakbed-run"
version = "1.0.0"
description = "leakbed's ServerApp and ClientApp (installed), as leakbed run submits them"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "leakbed"

[tool.flwr.app.components]
serverapp = "{server_app}"
clientapp = "client.app:app"

[tool.flwr.app.config]
config = ""
set = ""
prior = ""
out-dir = ""
"""
FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # the run uses this environment, never a fresh venv
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "PYTHONUNBUFFERED": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # Ray's FutureWarning about GPU visibility when a run asks for none
}
Progress = Callable[[int, dict[str, float]], None]
MARK = "LEAKBED_SIMULATION_LINK"  # in the environment of every process a SimulationLink starts


class SimulationFailed(RuntimeError):
    """Every start of a prior's simulation ended without results (the CLI's one-line error, exit 1)."""


def _bin(name: str) -> str:
    """A console script of this environment (``flwr``, ``flower-superlink``)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def toml_string(value: str) -> str:
    """A ``--run-config`` value, quoted with the quote it does not hold: flwr's parser splits on spaces outside
    quotes and takes no escaped quote, so a value holding both kinds cannot be passed (ValueError, one line)."""
    if "'" not in value:
        return f"'{value}'"  # a TOML literal string: nothing inside is escaped
    if '"' not in value and "\\" not in value:
        return f'"{value}"'
    raise ValueError(f"a --run-config value holds both quote kinds (or a backslash), which flwr cannot parse: {value}")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:  # noqa: S310 - loopback
            return 200 <= r.status < 300
    except OSError:
        return False


class SimulationLink:
    """A SuperLink in simulation mode that this process owns: started on a free port with a private FLWR_HOME,
    stopped with everything it started (the Simulation Runtime, Ray, attack workers).

    ``ray_address``: the runs join that Ray cluster. Else, with ``own_ray``, the link starts one private Ray head
    that every run on it joins (a run then skips Ray's own start and stop: about 5 s of wall and 3 CPU-seconds
    here, per run of a sweep or prior of a run); without, each run starts a Ray of its own."""

    def __init__(
        self,
        logs: Path,
        ray_address: str = "",
        own_ray: bool = False,
        server_app: str = "leakbed.apps:server_app",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="leakbed-flwr-"))
        self.app = self.home / "app"
        self.app.mkdir()
        (self.app / "pyproject.toml").write_text(APP_PYPROJECT.replace("{server_app}", server_app), encoding="utf-8")
        self.port = free_port()
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        bin_dir = str(Path(sys.executable).parent)  # Flower starts flower-superexec and flwr-simulation by name
        path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        self.mark = uuid.uuid4().hex  # every process of this link inherits it: stop() finds them all by it
        self.env = {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(self.home), "PATH": path, "FLWR_LOG_LEVEL": "INFO",
                    MARK: self.mark, **(extra_env or {})}  # fmt: skip
        self.env.pop("RAY_ADDRESS", None)  # a private Ray, unless the config names a cluster
        if ray_address:
            self.env["RAY_ADDRESS"] = ray_address
        ray_head = None
        if own_ray and not ray_address:  # started beside the SuperLink: the two start-ups overlap
            ray_head, self.env["RAY_ADDRESS"] = self._start_ray(logs)
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "leakbed"\n\n[superlink.leakbed]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n',
            encoding="utf-8",
        )
        self._log = (logs / "superlink.log").open("ab")
        try:
            self._start_superlink()
        except OSError:
            self._log.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        if ray_head is not None and ray_head.wait(timeout=180) != 0:
            # Ray's head failed to come up (it does on a busy machine): each run starts a Ray of its own instead, as
            # without own_ray, and simulate() starts a run again when that fails
            log.warning("the private Ray head did not start (see %s); each run starts its own Ray", logs / "ray-head.log")
            self.stop_processes()
            self.env.pop("RAY_ADDRESS")
            self._start_superlink()

    def _start_superlink(self) -> None:
        """Start the SuperLink with this link's environment and wait for its HTTP API."""
        self.proc = subprocess.Popen(
            [_bin("flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
             "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + SUPERLINK_START_TIMEOUT
        while not _healthy(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SimulationFailed(f"the simulation SuperLink did not start (see {self.logs / 'superlink.log'})")
            time.sleep(0.3)

    def _start_ray(self, logs: Path) -> tuple[subprocess.Popen, str]:
        """Start a private Ray head for this link's runs (its processes carry the link's mark); returns the
        ``ray start`` process (it exits once the head is up) and the head's address."""
        port = free_port()
        cmd = [_bin("ray"), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={self.home / 'ray'}", f"--num-cpus={os.cpu_count() or 1}"]  # fmt: skip
        with (logs / "ray-head.log").open("ab") as out:
            return subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT), f"127.0.0.1:{port}"

    def submit(self, run_config: dict[str, str], federation_config: dict[str, object], log_path: Path) -> int:
        """``flwr run`` of leakbed's app with this run and federation config, streaming its log until the run ends."""
        rc = " ".join(f"{k}={toml_string(v)}" for k, v in run_config.items())
        fc = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v}"
                      for k, v in federation_config.items())  # fmt: skip
        cmd = [_bin("flwr"), "run", str(self.app), "leakbed", "--stream", "--run-config", rc, "--federation-config", fc]
        with log_path.open("ab") as out:
            return subprocess.run(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode

    def stop_processes(self) -> None:
        """End the SuperLink and every process it started, however far they detached (Flower starts the
        Simulation Runtime in a session of its own, Ray re-parents its daemons): each carries this link's mark."""
        # a short grace: Ray's GCS and raylet ignore SIGTERM (``ray stop --force`` kills them too)
        terminate([self.proc.pid, *descendants(self.proc.pid), *marked(MARK, self.mark)], grace=STOP_GRACE)
        self.proc.wait(timeout=30)
        terminate(marked(MARK, self.mark), grace=1.0)  # anything started while the first ones were ending

    def stop(self) -> None:
        """Stop every process of the link and remove its FLWR_HOME."""
        self.stop_processes()
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> SimulationLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    """Call ``progress(round, {"utility": ...})`` for each round the ServerApp reports in ``progress_file`` (round 0:
    the initial model's evaluation), until ``done()``."""
    seen = None
    while not done():
        time.sleep(0.2)
        if progress is None or not progress_file.exists():
            continue
        try:
            state = json.loads(progress_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if state["round"] != seen:
            seen = state["round"]
            progress(seen, {"utility": state["utility"]})


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
        log.warning("the %s prior left no results (%s); starting it again from scratch", rule, why or "see its log")
        for folder in (layout.results(rule), layout.store(rule), layout.referee(rule)):
            shutil.rmtree(folder, ignore_errors=True)
    if not path.exists():
        starts = f"{attempt + 1} start{'s' if attempt else ''}"
        raise SimulationFailed(
            f"the simulation of the {rule} prior ended without results after {starts}"
            + (f": {why}" if why else f" (see {logs / f'flwr-run-{rule}.log'})")
        )
    return json.loads(path.read_text())
