"""`leakbed compose up` / `down`: the whole testbed as containers, on whichever engine is present.

The rendering for N SuperNodes and W workers (``leakbed.compose``) is written to a work folder
(``.leakbed/compose/<project>/``, never over the committed files), with the images chosen by
``leakbed.images`` (official, or built from Debian packages), and started with the compose binary
against Docker or Podman's Docker API (``leakbed.engine``). Relative paths in the files resolve
against the repository root (``--project-directory``), as in the committed ``docker-compose.yml``.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from leakbed import compose, flower, images
from leakbed.engine import SECCOMP_PROFILE, Engine, EngineError

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".leakbed" / "compose"
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
        return WORK / self.project

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
        args = ["-p", self.project, "--project-directory", str(ROOT)]
        for f in self.files:
            args += ["-f", str(f)]
        return args


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
            svc["volumes"] = [v.replace("./deploy/certs:", f"{certs}:") for v in svc["volumes"]]


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
        ["bash", str(ROOT / "deploy/certs.sh"), str(stack.certs), str(stack.supernodes)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise EngineError(f"deploy/certs.sh: {out.stderr.strip().splitlines()[-1:]}")
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
        left = down(engine, stack)
        say(f"stopped: the stack is down{'; still there: ' + ', '.join(left) if left else ''}")
        raise
    if chosen.grafana is None:
        say("grafana: no image without a registry; every dashboard query can be run against Prometheus instead")
    write_connection(stack)
    return chosen


def run_compose(engine: Engine, stack: Stack, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The compose binary on ``stack``'s files, project and published ports."""
    return engine.compose_run(*stack.compose_args(), *args, check=check, env=stack.env())


def down(engine: Engine, stack: Stack) -> list[str]:
    """Remove the stack's containers, networks and volumes; returns what is left (nothing, normally)."""
    if stack.files[0].exists():
        run_compose(engine, stack, "down", "-v", "--remove-orphans", "-t", "5", check=False)
    left = leftovers(engine, stack.project)
    if not left:
        shutil.rmtree(stack.folder, ignore_errors=True)
    return left


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
