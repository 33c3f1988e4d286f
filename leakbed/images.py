"""Build the deployment's images, from Flower's official ones or, offline, from Debian packages.

``official``: the app image starts from ``flwr/superexec``, and compose pulls ``flwr/superlink``,
``flwr/supernode``, ``prom/prometheus`` and ``grafana/grafana``. ``local``: where no container
registry is reachable, a Debian bookworm root file system (debootstrap, Debian's mirror) becomes
``localhost/leakbed-debian``, Flower's three entry points are pip-installed on it
(``leakbed/deploy/base/flwr.Dockerfile``) and Prometheus comes from Debian's package; there is no Grafana.
Every build passes an optional CA bundle as the build secret ``ca`` so pip works behind a
TLS-inspecting proxy. The app images are built from a context staged from the installed package
(``leakbed.build_context``: its pinned requirements and the package as a wheel), never from a checkout;
their dependency layer depends on the pins alone, so a code change rebuilds only the layers after it
(see ``leakbed/deploy/docker/app.Dockerfile``).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from leakbed import build_context
from leakbed.engine import Engine, EngineError, machine_lock
from leakbed.package_data import DEPLOY

FLWR_VERSION = "1.42.0"
APP_IMAGE = "localhost/leakbed-app:0.1.0"
APP_CUDA_IMAGE = "localhost/leakbed-app-cuda:0.1.0"
DEBIAN_IMAGE = "localhost/leakbed-debian:bookworm"
REGISTRY_PROBE = "https://registry-1.docker.io/v2/"


@dataclass(frozen=True)
class Images:
    """The image of each service kind, for one base."""

    base: str  # "official" or "local"
    superexec: str
    superlink: str
    supernode: str
    prometheus: str
    grafana: str | None  # None: no Grafana image can be had


OFFICIAL = Images(
    "official",
    superexec=f"docker.io/flwr/superexec:{FLWR_VERSION}-py3.11-ubuntu24.04",
    superlink=f"docker.io/flwr/superlink:{FLWR_VERSION}",
    supernode=f"docker.io/flwr/supernode:{FLWR_VERSION}",
    prometheus="docker.io/prom/prometheus:v2.53.4",
    grafana="docker.io/grafana/grafana:11.6.0",
)
LOCAL = Images(
    "local",
    superexec=f"localhost/leakbed-flwr:{FLWR_VERSION}",
    superlink=f"localhost/leakbed-flwr:{FLWR_VERSION}",
    supernode=f"localhost/leakbed-flwr:{FLWR_VERSION}",
    prometheus="localhost/leakbed-prometheus:bookworm",
    grafana=None,
)


def registry_reachable(timeout: float = 5.0) -> bool:
    """Docker Hub's registry answers its API root (401 without credentials) when it is reachable."""
    try:
        urllib.request.urlopen(REGISTRY_PROBE, timeout=timeout, context=ssl.create_default_context())  # noqa: S310
        return True
    except urllib.error.HTTPError as e:
        return e.code == 401
    except (OSError, ValueError):
        return False


def choose(base: str) -> tuple[Images, str]:
    """The images for ``base`` (official, local or auto) and why they were chosen."""
    if base == "official":
        return OFFICIAL, "official images (as asked)"
    if base == "local":
        return LOCAL, "images built from Debian packages (as asked)"
    if base != "auto":
        raise EngineError(f"--base {base}: must be auto, official or local")
    if registry_reachable():
        return OFFICIAL, "official images (Docker Hub answers)"
    return LOCAL, "images built from Debian packages (no container registry answers)"


def ca_bundle() -> Path | None:
    """The CA bundle pip should trust inside builds: the one the host's pip uses, else the system's."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    return system if system.is_file() else None


def image_exists(engine: Engine, tag: str) -> bool:
    return engine.run("image", "inspect", tag, check=False).returncode == 0


def _build(engine: Engine, dockerfile: Path, context: Path, tag: str, args: dict[str, str], quiet: bool) -> None:
    argv = ["build", "-f", str(dockerfile), "-t", tag]
    for key, value in args.items():
        argv += ["--build-arg", f"{key}={value}"]
    ca = ca_bundle()
    if ca is not None:
        argv += ["--secret", f"id=ca,src={ca}"]
    engine.run(*argv, str(context), capture=quiet)


def build(
    engine: Engine,
    images: Images,
    gpu: bool = False,
    quiet: bool = True,
    say: Callable[[str], None] = print,
    plugins: Sequence[Path] = (),
) -> dict[str, float]:
    """Build what ``images`` needs, the app image with the ``plugins`` packages installed; returns seconds per image
    (layer caches make rebuilds quick). One build at a time on a machine: a second waits, then finds every layer
    cached."""
    with machine_lock("build"), tempfile.TemporaryDirectory(prefix="leakbed-build-") as tmp:
        context = Path(tmp)
        try:
            wheels = build_context.stage(context, plugins)
        except build_context.ContextError as err:
            raise EngineError(str(err)) from None
        for wheel in wheels[1:]:
            say(f"plugin: {wheel.name}")
        return _build_all(engine, images, gpu, quiet, say, context)


def _build_all(
    engine: Engine, images: Images, gpu: bool, quiet: bool, say: Callable[[str], None], staged: Path
) -> dict[str, float]:
    """Each image in turn: the offline bases (their folder of the package as context), then the app images on the
    ``staged`` context."""
    local = images.base == "local"
    base_dir, docker_dir = DEPLOY / "base", DEPLOY / "docker"
    # (tag, Dockerfile, context, build args); PyTorch's index is a registry too: offline, PyPI's (CUDA) torch runs on CPU
    steps: list[tuple[str, Path, Path, dict[str, str]]] = []
    if local:
        steps += [
            (
                images.superexec,
                base_dir / "flwr.Dockerfile",
                base_dir,
                {"DEBIAN_IMAGE": DEBIAN_IMAGE, "FLWR_VERSION": FLWR_VERSION},
            ),
            (images.prometheus, base_dir / "prometheus.Dockerfile", base_dir, {"DEBIAN_IMAGE": DEBIAN_IMAGE}),
        ]
    steps.append(
        (
            APP_IMAGE,
            docker_dir / "app.Dockerfile",
            staged,
            {"BASE_IMAGE": images.superexec, **({"TORCH_INDEX": ""} if local else {})},
        )
    )
    if gpu:
        steps.append((APP_CUDA_IMAGE, docker_dir / "app-cuda.Dockerfile", staged, {"BASE_IMAGE": DEBIAN_IMAGE} if local else {}))
    timings: dict[str, float] = {}
    if local and not image_exists(engine, DEBIAN_IMAGE):
        say(f"building {DEBIAN_IMAGE} (debootstrap) …")
        start = time.monotonic()
        _debian_rootfs(engine, str(base_dir / "debian-rootfs.sh"), quiet)
        timings[DEBIAN_IMAGE] = round(time.monotonic() - start, 1)
    for tag, dockerfile, context, args in steps:
        say(f"building {tag} …")
        start = time.monotonic()
        _build(engine, dockerfile, context, tag, args, quiet)
        timings[tag] = round(time.monotonic() - start, 1)
    return timings


def _debian_rootfs(engine: Engine, script: str, quiet: bool) -> None:
    argv = ["bash", script, engine.cli, DEBIAN_IMAGE]
    if os.geteuid() != 0:
        raise EngineError(f"{DEBIAN_IMAGE} is built with debootstrap, which needs root: sudo {' '.join(argv)}")
    out = subprocess.run(argv, env=engine.environ(), capture_output=quiet, text=True, check=False)
    if out.returncode != 0:
        tail = (out.stderr or "").strip().splitlines()[-1:]
        raise EngineError(f"{script} exited {out.returncode}{': ' + tail[0] if tail else ''}")
