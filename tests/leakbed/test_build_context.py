"""The app image's build context (``leakbed.build_context``): staged from the installed package, not a checkout."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from leakbed import build_context
from leakbed.package_data import PACKAGE
from tests.conftest import REPO


def _staged(folder: Path) -> zipfile.ZipFile:
    wheels = build_context.stage(folder)
    assert [w.name for w in wheels] == ["leakbed-0.1.0-py3-none-any.whl"]
    return zipfile.ZipFile(wheels[0])


def test_the_context_holds_the_pins_and_the_package_wheel_only(tmp_path: Path) -> None:
    wheel = _staged(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "requirements.txt", "wheels", "wheels/leakbed-0.1.0-py3-none-any.whl"]  # fmt: skip
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = sorted(p.replace("[simulation,dp]", "[dp,simulation]") for p in pins)  # extras as the metadata sorts them
    assert sorted((tmp_path / "requirements.txt").read_text().split()) == wanted
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"leakbed", "leakbed-0.1.0.dist-info"}  # one top-level package
    for shipped in ("leakbed/cli.py", "leakbed/py.typed", "leakbed/configs/quickstart.toml", "leakbed/deploy/certs.sh",
                    "leakbed/deploy/docker-compose.yml", "leakbed/deploy/seccomp/attack-worker.json",
                    "leakbed/workers/service_pb2_grpc.py", "leakbed-0.1.0.dist-info/entry_points.txt"):  # fmt: skip
        assert shipped in names, shipped
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/deploy/certs/" in n]
    entry_points = wheel.read("leakbed-0.1.0.dist-info/entry_points.txt").decode()
    assert "leakbed = leakbed.cli:main" in entry_points and "mlp = leakbed.attacks.reidentify:MLP" in entry_points


def test_the_wheel_records_every_file_with_its_hash(tmp_path: Path) -> None:
    wheel = _staged(tmp_path)
    rows = list(csv.reader(io.StringIO(wheel.read("leakbed-0.1.0.dist-info/RECORD").decode())))
    assert sorted(r[0] for r in rows) == sorted(wheel.namelist())
    for name, digest, size in rows:
        if name.endswith("RECORD"):
            assert digest == size == ""
            continue
        data = wheel.read(name)
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert int(size) == len(data)
    assert wheel.read("leakbed/configs/quickstart.toml") == (PACKAGE / "configs" / "quickstart.toml").read_bytes()


def test_the_same_package_makes_the_same_wheel_and_private_keys_never_ship(tmp_path: Path, monkeypatch) -> None:
    """Same bytes for the same files (the image's install layer stays cached); a key ``certs.sh`` left in the
    package's ``deploy/certs/`` is not packed."""
    first = (_staged(tmp_path / "a").filename, _staged(tmp_path / "b").filename)
    assert Path(first[0]).read_bytes() == Path(first[1]).read_bytes()
    fake = tmp_path / "pkg"
    (fake / "deploy" / "certs").mkdir(parents=True)
    (fake / "deploy" / "certs" / "server.key").write_text("secret")
    (fake / "__pycache__").mkdir()
    (fake / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (fake / "mod.py").write_text("x = 1\n")
    monkeypatch.setattr(build_context, "PACKAGE", fake)
    assert [name for name, _ in build_context.package_files()] == ["leakbed/mod.py"]


def test_a_plugin_that_is_no_package_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(build_context.ContextError, match=r"^--plugin .*: not a Python package \(no pyproject.toml\)$"):
        build_context.stage(tmp_path / "ctx", [tmp_path])


def test_a_checkouts_egg_info_first_on_sys_path_is_not_taken_for_the_install(tmp_path, monkeypatch):
    """A fresh clone after ``pip install -e .`` holds setuptools' ``leakbed.egg-info`` (PKG-INFO, no METADATA); with the
    working folder first on ``sys.path`` (pytest, ``python -m``) ``metadata.distribution`` found it first and every
    image build failed: 'the installed leakbed has no METADATA' (CI on a fresh clone, 2026-11-28)."""
    egg = tmp_path / "leakbed.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: leakbed\nVersion: 0.1.0\n")
    (egg / "requires.txt").write_text("stale-requirement==1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert metadata.distribution("leakbed").read_text("METADATA") is None  # the trap, as on the fresh clone
    dist = build_context.installed()
    assert dist.read_text("METADATA") is not None
    assert "stale-requirement==1" not in build_context.requirements()
    wheel = build_context.repack(tmp_path / "out")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("leakbed-0.1.0.dist-info/METADATA").startswith(b"Metadata-Version")
