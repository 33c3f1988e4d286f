"""`leakbed compose up` / `down`: the whole testbed as containers, on whichever engine is present.

The rendering for N SuperNodes and W workers (``leakbed.compose``) is written to a work folder
(``$LEAKBED_HOME/.leakbed/compose/<project>/``, LEAKBED_HOME defaulting to the current folder; never over the
shipped files), with the images chosen by ``leakbed.images`` (official, or built from Debian packages), and
started with the compose binary against Docker or Podman's Docker API (``leakbed.engine``). Relative paths in
the files resolve against the installed package's ``leakbed/deploy/`` (``--project-directory``), as in the
shipped ``docker-compose.yml``.
"""

from __future__ import annotations

import math
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import yaml

from leakbed import compose, flower, images
from leakbed.engine import SECCOMP_PROFILE, Engine, EngineError
from leakbed.package_data import DEPLOY

WORK = Path(os.environ.get("LEAKBED_HOME", ".")) / ".leakbed" / "compose"
CONNECTION = "leakbed-compose"
APP_SERVICES = ("serverapp", "clientapp-", "attack-worker-", "register-supernodes")
CERT_UID = 49999  # the images' user: it must read the certificates and keys mounted as secrets


@dataclass(frozen=True)
class Stack:
    """One rendered deployment: where its files are and how to reach it."""

    project: str
    supernodes: int
    workers: int
    tls: bool
    superlink_port: int = 9093
    prometheus_port: int = 9090
    grafana_port: int = 3000

    @property
    def folder(self) -> Path:
        return (WORK / self.project).absolute()  # compose resolves a relative path against DEPLOY

    @property
    def files(self) -> list[Path]:
        names = ["docker-compose.yml", *(["compose.tls.yml"] if self.tls else [])]
        return [self.folder / n for n in names]

    @property
    def certs(self) -> Path:
        return self.folder / "certs"

    @property
    def flwr_home(self) -> Path:
        return self.folder / "flwr"

    def env(self) -> dict[str, str]:
        return {
            "LEAKBED_SUPERLINK_PORT": str(self.superlink_port),
            "LEAKBED_PROMETHEUS_PORT": str(self.prometheus_port),
            "LEAKBED_GRAFANA_PORT": str(self.grafana_port),
        }

    def compose_args(self) -> list[str]:
        args = ["-p", self.project, "--project-directory", str(DEPLOY)]
        for f in self.files:
            args += ["-f", str(f)]
        return args


def app() -> Path:
    """leakbed's Flower app for ``flwr run`` on a stack: one ``pyproject.toml`` naming the components the images have
    installed (``flower.write_app``), in the work folder (absolute)."""
    return flower.write_app((WORK / "app").absolute())


def _use_images(services: dict, chosen: images.Images) -> None:
    """Point every service at ``chosen``; the app image is built, never pulled."""
    for name, svc in list(services.items()):
        if name.startswith(APP_SERVICES):
            svc.pop("build", None)
            svc["image"] = images.APP_IMAGE
        elif name == "superlink":
            svc["image"], svc["entrypoint"] = chosen.superlink, ["flower-superlink"]
        elif name.startswith("supernode-"):
            svc["image"], svc["entrypoint"] = chosen.supernode, ["flower-supernode"]
        elif name == "prometheus":
            svc["image"], svc["entrypoint"] = chosen.prometheus, ["prometheus"]
        elif name == "grafana":
            if chosen.grafana is None:
                del services[name]
            else:
                svc["image"] = chosen.grafana


def _certs_paths(doc: dict, certs: Path) -> None:
    for secret in doc.get("secrets", {}).values():
        secret["file"] = str(certs / Path(secret["file"]).name)
    for svc in doc["services"].values():
        if "volumes" in svc:
            svc["volumes"] = [v.replace("./certs:", f"{certs}:") for v in svc["volumes"]]


def _engine_seccomp(services: dict) -> None:
    """Podman 4.3's Docker API takes a seccomp profile only as a file path, while compose sends the profile's
    text: on Podman the attack workers' profile comes from leakbed's containers.conf instead (``engine.podman_conf``).
    It also ignores Docker's ``systempaths=unconfined`` (tried): its own ``unmask=ALL`` leaves /proc unmasked, so
    the gateway can mount each lane's /proc."""
    for svc in services.values():
        if "security_opt" in svc:
            opts = [o for o in svc["security_opt"] if not o.startswith("seccomp=")]
            svc["security_opt"] = ["unmask=ALL" if o == "systempaths=unconfined" else o for o in opts]


def render(stack: Stack, chosen: images.Images, podman: bool = False) -> list[Path]:
    """Write the stack's compose files and Prometheus config; returns the compose files."""
    stack.folder.mkdir(parents=True, exist_ok=True)
    prom = stack.folder / "prometheus.yml"
    prom.write_text(compose.render("prometheus", stack.supernodes, stack.workers))
    base = compose.render_base(stack.supernodes, stack.workers)
    _use_images(base["services"], chosen)
    pvol = base["services"]["prometheus"]["volumes"]
    base["services"]["prometheus"]["volumes"] = [
        f"{prom}:/etc/prometheus/prometheus.yml:ro" if "prometheus.yml" in v else v for v in pvol
    ]
    if chosen.grafana is None:
        base["volumes"].pop("grafana-data", None)
    if podman:
        _engine_seccomp(base["services"])
    docs = {"docker-compose.yml": base}
    if stack.tls:
        tls = compose.render_tls(stack.supernodes, stack.workers)
        _use_images(tls["services"], chosen)
        _certs_paths(tls, stack.certs)
        docs["compose.tls.yml"] = tls
    for name, doc in docs.items():
        (stack.folder / name).write_text(
            f"# leakbed compose up: {stack.supernodes} SuperNodes, {stack.workers} workers, {chosen.base} images\n"
            + yaml.safe_dump(doc, sort_keys=False, width=120)
        )
    return stack.files


def make_certs(stack: Stack) -> None:
    """The TLS overlay's CA, SuperLink, worker and SuperNode keys, readable by the images' user."""
    env = {**os.environ, "LEAKBED_CERT_WORKERS": str(max(stack.workers, 1))}
    out = subprocess.run(
        ["bash", str(DEPLOY / "certs.sh"), str(stack.certs), str(stack.supernodes)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise EngineError(f"certs.sh: {out.stderr.strip().splitlines()[-1:]}")
    if os.geteuid() == 0:
        for path in [stack.certs, *stack.certs.iterdir()]:
            os.chown(path, CERT_UID, CERT_UID)


def write_connection(stack: Stack) -> Path:
    """``$FLWR_HOME/config.toml`` naming the stack's SuperLink as the connection ``leakbed-compose``."""
    certs = stack.certs / "ca.crt" if stack.tls else None
    return flower.write_home(stack.flwr_home, CONNECTION, f"127.0.0.1:{stack.superlink_port}", root_certificates=certs)


def wait_running(engine: Engine, stack: Stack, timeout: float = 180.0) -> list[str]:
    """Names of the stack's running services, once every long-running one is up."""
    wanted = {s for s in _services(stack) if s != "register-supernodes"}
    running: set[str] = set()

    def up() -> bool:
        running.clear()
        running.update(run_compose(engine, stack, "ps", "--status", "running", "--services", check=False).stdout.split())
        return wanted <= running

    try:
        flower.wait_until(up, timeout, "the stack's services")
    except flower.NotReady:
        raise EngineError(f"services not running after {timeout:.0f}s: {', '.join(sorted(wanted - running))}") from None
    return sorted(running)


def wait_superlink(stack: Stack, timeout: float = 300.0) -> None:
    """Until the SuperLink answers ``/health`` on its published port, so the printed ``flwr run``
    works at once (a loaded machine takes a minute to start its Python)."""
    scheme = "https" if stack.tls else "http"
    context = ssl.create_default_context(cafile=str(stack.certs / "ca.crt")) if stack.tls else None
    url = f"{scheme}://127.0.0.1:{stack.superlink_port}/health"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5, context=context):  # noqa: S310 - our own SuperLink
                return True
        except OSError:
            return False

    try:
        flower.wait_until(healthy, timeout, f"the SuperLink at {url}")
    except flower.NotReady as err:
        raise EngineError(str(err)) from None


def _services(stack: Stack) -> list[str]:
    names: set[str] = set()
    for f in stack.files:
        names |= set(yaml.safe_load(f.read_text())["services"])
    return sorted(names)


def up(
    engine: Engine,
    stack: Stack,
    base: str = "auto",
    build: bool = True,
    gpu: bool = False,
    say: Callable[[str], None] = print,
    plugins: Sequence[Path] = (),
) -> images.Images:
    """Build (unless ``build`` is False; with the ``plugins`` packages), render and start ``stack``; returns the
    images used."""
    for note in engine.notes:
        say(note)
    chosen, why = images.choose(base)
    say(f"images: {why}")
    if build:
        for tag, seconds in images.build(engine, chosen, gpu=gpu, say=say, plugins=plugins).items():
            say(f"  {tag}: {seconds:.0f} s")
    if stack.tls:
        make_certs(stack)
    podman = engine.name == "podman"
    if podman and "CONTAINERS_CONF" not in engine.env:
        say(f"podman: your own containers.conf is in use; the attack workers get leakbed's seccomp profile only if it names "
            f"seccomp_profile = \"{SECCOMP_PROFILE}\"")
    render(stack, chosen, podman=podman)
    pull = "missing" if chosen.base == "official" else "never"
    try:
        run_compose(engine, stack, "up", "-d", "--no-build", "--pull", pull)
        running = wait_running(engine, stack)
        say(f"running: {', '.join(running)}")
        wait_superlink(stack)
    except BaseException:  # an interrupt, or a stack that did not come up: nothing of it is left running
        left = down(engine, stack, grace=0)  # it never served: nothing in it to let finish
        say(f"stopped: the stack is down{'; still there: ' + ', '.join(left) if left else ''}")
        raise
    if chosen.grafana is None:
        say("grafana: no image without a registry; every dashboard query can be run against Prometheus instead")
    write_connection(stack)
    return chosen


def run_compose(engine: Engine, stack: Stack, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The compose binary on ``stack``'s files, project and published ports."""
    return engine.compose_run(*stack.compose_args(), *args, check=check, env=stack.env())


SWEEPS, SWEEP_S = 3, 1.0  # removals by label after ``compose down``, this many seconds apart


def down(engine: Engine, stack: Stack, grace: int = 5) -> list[str]:
    """Remove the stack's containers, networks and volumes (each container gets ``grace`` seconds after SIGTERM: Flower's
    processes in them ignore it); returns what is left (nothing, normally).

    ``compose down`` removes what it lists; an interrupted ``compose up`` may leave a create the engine is still serving,
    whose container lands after that list (seen once with Podman: one attack worker and its volumes). What carries the
    project's label afterwards is removed by label, up to ``SWEEPS`` times."""
    if stack.files[0].exists():
        run_compose(engine, stack, "down", "-v", "--remove-orphans", "-t", str(grace), check=False)
    left = leftovers(engine, stack.project)
    for _ in range(SWEEPS):
        if not left:
            break
        time.sleep(SWEEP_S)
        _remove(engine, left)
        left = leftovers(engine, stack.project)
    if not left:
        shutil.rmtree(stack.folder, ignore_errors=True)
    return left


def _remove(engine: Engine, found: list[str]) -> None:
    """Remove what ``leftovers`` found: containers first (their volumes and networks are in use until then)."""
    for kind in ("container", "volume", "network"):
        names = [item.split(" ", 1)[1] for item in found if item.startswith(f"{kind} ")]
        if not names:
            continue
        if kind == "container":
            engine.run("rm", "-f", *(["-t", "0"] if engine.name == "podman" else []), *names, check=False)
        else:
            engine.run(kind, "rm", "-f", *names, check=False)


def leftovers(engine: Engine, project: str) -> list[str]:
    """Containers, networks and volumes labelled with compose project ``project``."""
    label = f"label=com.docker.compose.project={project}"
    found = []
    for kind, fmt in (("container", "{{.Names}}"), ("network", "{{.Name}}"), ("volume", "{{.Name}}")):
        argv = (
            ["ps", "-a", "--filter", label, "--format", fmt]
            if kind == "container"
            else [kind, "ls", "--filter", label, "--format", fmt]
        )
        out = engine.run(*argv, check=False)
        found += [f"{kind} {name}" for name in out.stdout.split()]
    return found


class ComposeLauncher:
    """The compose launcher (``leakbed.launcher``): ``stack`` on ``engine``. ``start`` is ``up`` (build, render,
    ``compose up -d``, wait for the services and the SuperLink; brought down again on any failure or interrupt),
    ``stop`` is ``down`` (what it left is kept in ``left``), ``wait`` polls until none of its containers runs, ``logs``
    writes each service's ``compose logs`` to ``<stack folder>/logs/<service>.log`` (read them before ``stop``: ``down``
    removes the folder).

    The containers are not our processes: the engine's daemon starts and owns them, so no ``ProcessGroup`` can mark
    them. Their mark is the compose project label (``com.docker.compose.project``) every container, network and volume
    carries: ``down`` removes by project and ``leftovers`` finds what is left by that label, never by a name."""

    def __init__(
        self,
        engine: Engine,
        stack: Stack,
        *,
        base: str = "auto",
        build: bool = True,
        gpu: bool = False,
        say: Callable[[str], None] = print,
        plugins: Sequence[Path] = (),
    ) -> None:
        self.engine, self.stack, self.say = engine, stack, say
        self.base, self.build, self.gpu, self.plugins = base, build, gpu, plugins
        self.left: list[str] = []

    def start(self) -> images.Images:
        """Bring the stack up (``up``); returns the images used."""
        return up(self.engine, self.stack, self.base, self.build, self.gpu, self.say, self.plugins)

    def _containers(self) -> list[tuple[str, str, int]]:
        """(service, state, exit code) of each of the stack's containers, stopped ones included."""
        if not self.stack.files[0].exists():
            return []
        fmt = "{{.Service}} {{.State}} {{.ExitCode}}"
        out = run_compose(self.engine, self.stack, "ps", "--all", "--format", fmt, check=False).stdout
        rows = [line.split() for line in out.splitlines()]
        return [(s, state, int(code)) for s, state, code in (r for r in rows if len(r) == 3 and r[2].lstrip("-").isdigit())]

    def wait(self, timeout: float | None = None) -> int | None:
        """Until none of the stack's containers runs: the first non-zero exit code by service, else 0 (also for a
        stack already down); ``None`` while one still runs after ``timeout`` seconds."""
        seen: list[tuple[str, str, int]] = []

        def ended() -> bool:
            seen[:] = self._containers()
            return not any(state in ("running", "restarting", "paused") for _, state, _ in seen)

        try:
            flower.wait_until(ended, math.inf if timeout is None else timeout, f"compose project {self.stack.project}")
        except flower.NotReady:
            return None
        return next((code for _, _, code in sorted(seen) if code), 0)

    def logs(self) -> dict[str, Path]:
        """Each service's log as ``compose logs`` has it now (stdout and stderr in order), one file per service."""
        if not self.stack.files[0].exists():
            return {}
        folder = self.stack.folder / "logs"
        folder.mkdir(exist_ok=True)
        self.engine.ready()  # Podman's API service may have ended itself, idle, while the stack ran
        found = {}
        for service in _services(self.stack):
            found[service] = folder / f"{service}.log"
            argv = [*self.engine.compose, *self.stack.compose_args(), "logs", "--no-color", "--no-log-prefix", service]
            with found[service].open("w") as out:
                env = {**self.engine.environ(), **self.stack.env()}
                subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        return found

    def stop(self) -> None:
        """``down``: the stack's containers, networks and volumes removed; ``left`` names what is still there."""
        self.left = down(self.engine, self.stack)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
