"""Running a red-team route as root and as an ordinary user, with the hostile package written where both can read it.

As root each sandbox drops to a uid of its own; an ordinary user's sandboxes share its uid, so a route that holds as
root must be shown to hold there too (``tests/workers/ordinary.py`` makes the user and runs commands as it). The
red team's pip-installed environment (``childenv``) lives in pytest's folder, closed to others; a module that runs
its routes both ways writes ``leakbed-hostile`` (``tests/redteam/hostile``) into an environment of its own under
``/tmp`` instead, as pip leaves an ordinary install (``handmade``), readable by everyone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.redteam.handmade import Env, install, layered_env
from tests.workers.ordinary import Ordinary, ordinary

HOSTILE = Path(__file__).resolve().parent / "hostile"
WHO = ["root", "ordinary user"]  # a module-scoped ``who`` fixture's params


def entry_points(wanted: Callable[[str], bool]) -> dict[str, str]:
    """The hostile package's published attacks whose names ``wanted`` keeps (its pyproject's entry points)."""
    eps = tomllib.loads((HOSTILE / "pyproject.toml").read_text())["project"]["entry-points"]["leakbed.attacks"]
    return {name: value for name, value in eps.items() if wanted(name)}


@contextmanager
def hostile_env(prefix: str, published: dict[str, str]) -> Iterator[Env]:
    """An environment in ``/tmp`` holding ``leakbed-hostile`` with ``published`` entry points, readable by everyone."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o755)
    try:
        env = layered_env(folder)
        src = HOSTILE / "src"
        files = {str(p.relative_to(src)): p.read_text() for p in (src / "leakbed_hostile").rglob("*.py")}
        install(env.site, "leakbed-hostile", files=files, top_level=("leakbed_hostile",), entry_points=published)
        readable_by_everyone(folder)
        yield env
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def readable_by_everyone(folder: Path) -> None:
    """``folder`` and what it holds readable by the ordinary user that runs in it (scripts kept runnable; links left)."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path.stat().st_mode & 0o100 else 0o644)


def user(param: str, tmp_path_factory: pytest.TempPathFactory) -> Ordinary | None:
    """A ``who`` fixture's value: None for root (this test process's user), else an ordinary user."""
    if param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root half needs root")
        return None
    return ordinary(tmp_path_factory.mktemp("ordinary"))


def leakbed(env: Env, who: Ordinary | None, args: list[str], tmp: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``<env>/bin/python -m leakbed.cli ARGS`` as ``who``, in a folder of its own, with a cache of its own."""
    command = [str(env.python), "-m", "leakbed.cli", *args]
    if who is None:
        environ = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith("PYTEST_")}
        environ.update(LEAKBED_CACHE=str(env.root.parent / "cache-root"), HOME=str(tmp), FLWR_TELEMETRY_ENABLED="0")
        return subprocess.run(command, cwd=tmp, env=environ, capture_output=True, text=True, timeout=timeout, check=False)
    return who.run(command, cwd=who.folder("cwd"), env=who.env(), timeout=timeout)


def out_folder(who: Ordinary | None, tmp: Path) -> Path:
    """Where ``who``'s run writes: a folder it owns."""
    return (who.folder("runs") if who else tmp) / "run"
