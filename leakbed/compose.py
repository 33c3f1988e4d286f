"""Render the docker compose files of a deployment with N SuperNodes and W attack workers.

Compose has no per-replica index, and every SuperNode needs its own ``partition-id`` (its user),
so the per-device services are written out one by one from the templates in
``leakbed/deploy/templates/`` (``__I__`` = index, ``__N__`` = SuperNodes, ``__PORT__`` = the SuperNode's
runtime port, ``__W__`` = workers). The committed (and shipped) ``leakbed/deploy/docker-compose.yml``, its
overlays ``compose.tls.yml`` and ``compose.gpu.yml``, ``prometheus/prometheus.yml`` and the attack workers'
seccomp profile ``seccomp/attack-worker.json`` (``workers.seccomp``), all in ``leakbed/deploy/``, are the
rendering for the defaults; a test checks they equal a fresh one. Relative paths in them resolve against that
folder (compose's project directory), so they work from the installed package as from a checkout.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from leakbed.core.errors import LeakbedError
from leakbed.package_data import DEPLOY
from leakbed.workers.seccomp import oci_profile

TEMPLATES = DEPLOY / "templates"
DEFAULT_SUPERNODES = 3
DEFAULT_WORKERS = 2
MAX_SUPERNODES = 1000
MAX_WORKERS = 64
RUNTIME_PORT = 9094  # SuperNode i serves its runtime API on RUNTIME_PORT + i
SERVER_METRICS_PORT = 9400
WORKER_SOCKETS = "/run/attack-workers"  # in the serverapp container: worker i's socket volume at WORKER_SOCKETS/i

# file name (relative to leakbed/deploy/) -> what it is
FILES = {
    "docker-compose.yml": "base",
    "compose.tls.yml": "tls",
    "compose.gpu.yml": "gpu",
    "prometheus/prometheus.yml": "prometheus",
    "seccomp/attack-worker.json": "seccomp",
}


class ComposeError(LeakbedError, ValueError):
    """Bad rendering parameters (one line, for the CLI)."""


def _header(kind: str, supernodes: int, workers: int) -> str:
    what = {
        "base": "SuperLink, ServerApp SuperExec, a SuperNode + ClientApp SuperExec per user, attack workers, Prometheus, Grafana",
        "tls": "overlay: TLS on the SuperLink (certificates from leakbed/deploy/certs.sh), SuperNode authentication",
        "gpu": "overlay: the ClientApp SuperExecs on a CUDA image with a GPU reservation",
        "prometheus": "Prometheus scrape config: the ServerApp's /metrics (the attack workers' counted by its pool)",
    }[kind]
    return (
        f"# {what}.\n"
        f"# Rendered by `leakbed compose --supernodes {supernodes} --workers {workers} --write` from leakbed/deploy/templates/;\n"
        "# edit the templates and re-render rather than editing this file.\n"
    )


def _load(name: str, **tokens: int | str) -> dict:
    text = (TEMPLATES / name).read_text()
    for key, value in tokens.items():
        text = text.replace(f"__{key}__", str(value))
    return yaml.safe_load(text)


def check_counts(supernodes: int, workers: int) -> None:
    if not 1 <= supernodes <= MAX_SUPERNODES:
        raise ComposeError(f"--supernodes {supernodes}: must be 1..{MAX_SUPERNODES}")
    if not 1 <= workers <= MAX_WORKERS:
        raise ComposeError(f"--workers {workers}: must be 1..{MAX_WORKERS}")
    if not TEMPLATES.is_dir():
        raise ComposeError(f"{TEMPLATES}: templates not found (a leakbed installed without its package data)")


def _per_device(template: str, supernodes: int, workers: int) -> dict:
    services: dict = {}
    for i in range(supernodes):
        services.update(_load(template, I=i, N=supernodes, PORT=RUNTIME_PORT + i, W=workers)["services"])
    return services


def worker_addresses(workers: int) -> list[str]:
    """The ``workers.addresses`` of the ServerApp: each worker's Unix socket on its volume."""
    return [f"unix:{WORKER_SOCKETS}/{w}/worker.sock" for w in range(workers)]


def render_base(supernodes: int, workers: int) -> dict:
    doc = _load("base.yml", N=supernodes, W=workers)
    services = doc["services"]
    for w in range(workers):
        worker = _load("attack-worker.yml", I=w, N=supernodes, W=workers)
        services.update(worker["services"])
        doc["volumes"].update(worker["volumes"])
        services["serverapp"]["volumes"].append(f"attack-worker-{w}-socket:{WORKER_SOCKETS}/{w}")
    services["serverapp"]["depends_on"] = ["superlink", *(f"attack-worker-{w}" for w in range(workers))]
    services.update(_per_device("supernode.yml", supernodes, workers))
    return doc


def render_tls(supernodes: int, workers: int) -> dict:
    doc = _load("tls.yml", N=supernodes, W=workers)
    doc["services"].update(_per_device("tls-supernode.yml", supernodes, workers))
    doc["secrets"].update(_per_device_secrets(supernodes))
    return doc


def _per_device_secrets(supernodes: int) -> dict:
    return {f"node-{i}-key": {"file": f"./certs/node-{i}"} for i in range(supernodes)}


def render_gpu(supernodes: int, workers: int) -> dict:
    return {"services": _per_device("gpu-clientapp.yml", supernodes, workers)}


def render_prometheus(supernodes: int, workers: int) -> dict:
    return _load("prometheus.yml", N=supernodes, W=workers)


RENDERERS = {"base": render_base, "tls": render_tls, "gpu": render_gpu, "prometheus": render_prometheus}


def render(kind: str, supernodes: int = DEFAULT_SUPERNODES, workers: int = DEFAULT_WORKERS) -> str:
    """One file's text: ``kind`` is base, tls, gpu, prometheus or seccomp."""
    check_counts(supernodes, workers)
    if kind == "seccomp":  # JSON has no comments: the profile names its source in a key of its own
        profile = {"comment": "leakbed attack workers (gateways building one bubblewrap sandbox per lane): rendered from "
                   "workers/seccomp.py", **oci_profile(gateway=True)}
        return json.dumps(profile, indent=1) + "\n"
    if kind not in RENDERERS:
        raise ComposeError(f"--file {kind}: must be one of {', '.join([*RENDERERS, 'seccomp'])}")
    body = yaml.safe_dump(RENDERERS[kind](supernodes, workers), sort_keys=False, default_flow_style=False, width=120)
    return _header(kind, supernodes, workers) + body


def render_all(supernodes: int = DEFAULT_SUPERNODES, workers: int = DEFAULT_WORKERS) -> dict[str, str]:
    """Every rendered file, keyed by its path relative to ``leakbed/deploy/``."""
    return {path: render(kind, supernodes, workers) for path, kind in FILES.items()}


def write_all(supernodes: int, workers: int, root: Path = DEPLOY) -> list[Path]:
    written = []
    for rel, text in render_all(supernodes, workers).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def overrides(supernodes: int, workers: int, tls: bool = False) -> list[str]:
    """Config overrides a run in the compose deployment needs: one user per SuperNode, the attack
    workers' addresses, attack scores every 5 rounds (so Grafana shows privacy over rounds, not
    only at the end), and the ServerApp's /metrics where Prometheus scrapes it (held 15 s after
    the run so the last scrape sees the final values). The same with the TLS overlay (``tls``):
    the workers are reached over Unix sockets either way."""
    addresses = ",".join(f'"{a}"' for a in worker_addresses(workers))
    return [
        f"data.synthetic.users={supernodes}",
        f"workers.addresses=[{addresses}]",
        "attack.score_every=5",
        f"telemetry.port={SERVER_METRICS_PORT}",
        "telemetry.host=0.0.0.0",
        "telemetry.hold_seconds=15",
    ]


def run_config(supernodes: int, workers: int, config: str = "quickstart", tls: bool = False) -> str:
    """The ``flwr run --run-config`` value for a rendering (``tls``: with the TLS overlay), escaped
    to sit inside double quotes in a shell; ``config`` is a built-in config's name or a path in the image."""
    value = f"config='{config}' set='{' '.join(overrides(supernodes, workers, tls))}'"
    return value.replace('"', '\\"')
