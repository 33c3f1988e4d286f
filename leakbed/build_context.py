"""The app image's build context, staged from the installed leakbed: no checkout is needed to build the images.

The context holds what the Dockerfiles (``leakbed/deploy/docker/``) copy and nothing else:

* ``requirements.txt``: the installed distribution's pinned requirements (its ``Requires-Dist`` without extras),
  so the image's dependency layer depends on the pins alone and is reused until one changes;
* ``wheels/leakbed-<version>-py3-none-any.whl``: the installed package repacked as a wheel (its files as installed,
  its metadata and entry points as installed), written deterministically (fixed times, sorted), so an unchanged
  package makes the same bytes and the image's install layer stays cached;
* ``wheels/<plugin>.whl``: a wheel of each plugin package named (``leakbed compose build --plugin PATH``).

Repacking works the same for a wheel install and an editable install of a checkout: the files are those of the
imported package's folder, less byte code and what never ships (``deploy/certs/``, where ``certs.sh`` writes
private keys).
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from leakbed.core.errors import LeakbedError
from leakbed.package_data import PACKAGE

DISTRIBUTION = "leakbed"
NEVER_SHIPPED = ("deploy/certs",)  # where certs.sh writes private keys in a checkout
EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's first date: the same files give the same wheel


class ContextError(LeakbedError, RuntimeError):
    """The build context could not be staged (one line, for the CLI)."""


def requirements() -> list[str]:
    """The installed leakbed's pinned requirements, extras left out (the image needs no test tools)."""
    return [r for r in installed().requires or [] if ";" not in r]


def package_files() -> list[tuple[str, Path]]:
    """(path in the wheel, file) of every file of the installed package, sorted."""
    found = []
    for path in PACKAGE.rglob("*"):
        rel = path.relative_to(PACKAGE)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if any(rel.as_posix().startswith(f"{skip}/") for skip in NEVER_SHIPPED):
            continue
        found.append((f"leakbed/{rel.as_posix()}", path))
    return sorted(found)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _add(wheel: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, EPOCH)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    wheel.writestr(info, data)


def installed() -> metadata.Distribution:
    """leakbed's installed distribution: the one with a METADATA file (a ``.dist-info``). From a checkout, the working
    folder on ``sys.path`` (``python -m``, pytest) also shows setuptools' ``leakbed.egg-info``, a build leftover of
    ``pip install -e`` that ``metadata.distribution`` may find first and that holds no METADATA."""
    found = list(metadata.distributions(name=DISTRIBUTION))
    for dist in found:
        if dist.read_text("METADATA") is not None:
            return dist
    if not found:
        raise ContextError(f"{DISTRIBUTION} is not installed (pip install leakbed)")
    raise ContextError(f"the installed {DISTRIBUTION} has no METADATA (reinstall it)")


def repack(folder: Path) -> Path:
    """The installed leakbed as a wheel in ``folder`` (PEP 427: its files, ``*.dist-info`` with the installed
    METADATA and entry points, a WHEEL file and a RECORD of hashes); returns the wheel's path."""
    dist = installed()
    version = dist.version
    info = f"{DISTRIBUTION}-{version}.dist-info"
    members: list[tuple[str, bytes, int]] = []
    for name, path in package_files():
        members.append((name, path.read_bytes(), 0o755 if path.stat().st_mode & 0o100 else 0o644))
    wheel_meta = "Wheel-Version: 1.0\nGenerator: leakbed.build_context\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    for name, text in (("METADATA", dist.read_text("METADATA")), ("entry_points.txt", dist.read_text("entry_points.txt")),
                       ("WHEEL", wheel_meta)):  # fmt: skip
        if text is None:
            raise ContextError(f"the installed {DISTRIBUTION} has no {name} (reinstall it)")
        members.append((f"{info}/{name}", text.encode(), 0o644))
    record = [_record_line(name, data) for name, data, _ in members] + [f"{info}/RECORD,,"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{DISTRIBUTION}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data, mode in members:
            _add(wheel, name, data, mode)
        _add(wheel, f"{info}/RECORD", ("\n".join(record) + "\n").encode())
    return path


def plugin_wheel(folder: Path, package: Path) -> None:
    """A wheel of the plugin package ``package`` (a folder with its own pyproject.toml) in ``folder``; ContextError
    (one line) for a folder that is no package or does not build."""
    if not (package / "pyproject.toml").is_file():
        raise ContextError(f"--plugin {package}: not a Python package (no pyproject.toml)")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder)]
    out = subprocess.run([*argv, str(package)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:]
        raise ContextError(f"--plugin {package}: its wheel did not build{': ' + tail[0] if tail else ''}")


def stage(folder: Path, plugins: Sequence[Path] = ()) -> list[Path]:
    """Write the build context into the empty ``folder``; returns the wheels, leakbed's first."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.txt").write_text("\n".join(requirements()) + "\n", encoding="utf-8")
    wheels = folder / "wheels"
    own = repack(wheels)
    for package in plugins:
        plugin_wheel(wheels, Path(package))
    return [own, *sorted(w for w in wheels.glob("*.whl") if w != own)]
