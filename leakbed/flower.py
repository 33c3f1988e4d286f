"""Flower's plumbing, once for every launcher (simulation, deploy-local, compose): the environment Flower's processes
run with, the Flower app they submit (a folder of one ``pyproject.toml`` naming the installed components), a Flower
home's ``config.toml`` (written with ``tomli_w``), the quoting of ``--run-config`` and
``--federation-config`` values, the console scripts of this environment, and the one wait-until loop.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import tomli_w

FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # the run uses this environment, never a fresh venv
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "PYTHONUNBUFFERED": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # Ray's FutureWarning about GPU visibility when a run asks for none
}


# The Flower app every launcher submits with ``flwr run``: leakbed's ServerApp and ClientApp, imported from the
# installed package (so the FAB is this one file, and no checkout is needed), with the run config keys the
# ServerApp reads.
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
clientapp = "leakbed.client.app:app"

[tool.flwr.app.config]
config = ""
set = ""
prior = ""
out-dir = ""
"""


class NotReady(TimeoutError):
    """What a launcher waited for did not come in time (one line naming it)."""


def script(name: str) -> str:
    """A console script of this environment (``flwr``, ``flower-superlink``, ``leakbed``): the one beside this Python,
    so it runs without the virtual environment activated."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def shown(path: str) -> str:
    """A path as a command printed for the user shows it: relative to the current folder when inside it."""
    try:
        rel = Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
    return str(rel) if str(rel).startswith(".") else f"./{rel}" if "/" not in str(rel) else str(rel)


def environment(home: Path, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of Flower's processes under the Flower home ``home``: quiet, no runtime installs, this
    environment's scripts first on PATH (Flower starts flower-superexec and flwr-simulation by name)."""
    base = dict(os.environ if base is None else base)
    path = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    return {**base, **FLOWER_ENV, "FLWR_HOME": str(home), "PATH": path, **extra}


def write_home(home: Path, connection: str, address: str, *, root_certificates: Path | None = None) -> Path:
    """``<home>/config.toml`` naming one SuperLink connection as the default (insecure unless ``root_certificates``)."""
    entry: dict[str, object] = {"address": address}
    if root_certificates is not None:
        entry["root-certificates"] = str(root_certificates)
    else:
        entry["insecure"] = True
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    path.write_text(tomli_w.dumps({"superlink": {"default": connection, connection: entry}}), encoding="utf-8")
    return path


def write_app(folder: Path, server_app: str = "leakbed.apps:server_app") -> Path:
    """A minimal Flower app folder for ``flwr run`` (its ``pyproject.toml`` names the installed components); returns
    ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT.replace("{server_app}", server_app), encoding="utf-8")
    return folder


def toml_string(value: str) -> str:
    """A ``--run-config`` value, quoted with the quote it does not hold: flwr's parser splits on spaces outside
    quotes and takes no escaped quote, so a value holding both kinds cannot be passed (ValueError, one line)."""
    if "'" not in value:
        return f"'{value}'"  # a TOML literal string: nothing inside is escaped
    if '"' not in value and "\\" not in value:
        return f'"{value}"'
    raise ValueError(f"a --run-config value holds both quote kinds (or a backslash), which flwr cannot parse: {value}")


def run_config(values: Mapping[str, str]) -> str:
    """The ``flwr run --run-config`` argument for these keys and string values."""
    return " ".join(f"{k}={toml_string(v)}" for k, v in values.items())


def federation_config(values: Mapping[str, object]) -> str:
    """The ``flwr run --federation-config`` argument (strings quoted, booleans lower-case)."""
    def one(v: object) -> str:
        return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={one(v)}" for k, v in values.items())


def wait_until(check: Callable[[], bool], timeout: float, what: str, failed: Callable[[], str] | None = None) -> None:
    """Poll ``check`` until it holds; ``NotReady`` naming ``what`` after ``timeout`` seconds, or at once when ``failed``
    returns a reason (a process it waits on has died)."""
    deadline = time.monotonic() + timeout
    while not check():
        why = failed() if failed is not None else ""
        if why:
            raise NotReady(f"{what}: {why}")
        if time.monotonic() > deadline:
            raise NotReady(f"{what}: not ready within {timeout:.0f} s")
        time.sleep(0.3)
