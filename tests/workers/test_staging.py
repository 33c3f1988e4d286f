"""The code a sandbox runs, copied by trusted code (``workers.staging``): a distribution's own files only, regular
files only, no link followed; an editable install's mapping read as data; keyed by content and reused; refused in
one line where the mapping names a link, the root or a folder that holds what a sandbox never sees."""

from __future__ import annotations

import os
import stat
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

from leakbed.workers import staging
from leakbed.workers.staging import StagingError, layout, stage
from tests.redteam.handmade import editable_source, install


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site folder to install into, and leakbed's cache of this test."""
    monkeypatch.setenv("LEAKBED_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "site"
    folder.mkdir()
    return folder


def dist(site: Path, name: str) -> PathDistribution:
    return PathDistribution(site / f"{name.replace('-', '_')}-0.1.dist-info")


def test_an_editable_install_is_copied_from_its_mapping_regular_files_only(site, tmp_path):
    src = editable_source(tmp_path / "proj", "lbpkg", {"attack.py": "X = 1\n", "tool.sh": "#!/bin/sh\n"})
    pkg = src / "lbpkg"
    (pkg / "tool.sh").chmod(0o755)
    (pkg / "escape").symlink_to("/")
    (pkg / "secret.txt").symlink_to(tmp_path / "secret.txt")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "attack.cpython-311.pyc").write_bytes(b"stale")
    os.mkfifo(pkg / "pipe")  # a reader that opened it would block
    (src / "other_pkg").mkdir()  # in the source folder, not the distribution's
    (src / "other_pkg" / "__init__.py").write_text("")
    install(site, "lb-pkg", editable_src=src, top_level=("lbpkg",), entry_points={"lb": "lbpkg.attack:X"})
    staged = stage(dist(site, "lb-pkg"))
    assert staged.files == {"lbpkg/__init__.py", "lbpkg/attack.py", "lbpkg/tool.sh", "lb_pkg-0.1.dist-info/METADATA",
                            "lb_pkg-0.1.dist-info/entry_points.txt"}  # fmt: skip
    assert sorted(staged.skipped) == ["lbpkg/escape: a link", "lbpkg/pipe: not a regular file", "lbpkg/secret.txt: a link"]
    assert staged.provides("lbpkg.attack") and staged.provides("lbpkg") and not staged.provides("other_pkg")
    assert (staged.root / "lbpkg" / "attack.py").read_text() == "X = 1\n"
    assert stat.S_IMODE((staged.root / "lbpkg" / "attack.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((staged.root / "lbpkg" / "tool.sh").stat().st_mode) == 0o555
    assert not any(p.is_symlink() for p in staged.root.rglob("*"))
    assert staged.root.is_relative_to(tmp_path / "cache" / "staging")


def test_the_copy_is_keyed_by_content_and_reused(site, tmp_path):
    src = editable_source(tmp_path / "proj", "lbpkg", {"attack.py": "X = 1\n"})
    install(site, "lb-pkg", editable_src=src, top_level=("lbpkg",), entry_points={"lb": "lbpkg.attack:X"})
    first = stage(dist(site, "lb-pkg"))
    assert stage(dist(site, "lb-pkg")) == first  # the same files: the same copy
    (src / "lbpkg" / "attack.py").write_text("X = 2\n")
    second = stage(dist(site, "lb-pkg"))
    assert second.key != first.key and second.root != first.root and (second.root / "lbpkg/attack.py").read_text() == "X = 2\n"
    staging._staged.clear()  # a new process: read again, the same content finds the same copy
    (src / "lbpkg" / "attack.py").write_text("X = 1\n")
    assert stage(dist(site, "lb-pkg")).root == first.root


def test_an_ordinary_install_is_copied_from_its_record(site):
    install(site, "lb-plain", files={"lbplain/__init__.py": "", "lbplain/attack.py": "Y = 1\n"}, top_level=("lbplain",),
            entry_points={"lb": "lbplain.attack:Y"})  # fmt: skip
    (site / "not_listed.py").write_text("Z = 1\n")  # beside it, not its own
    staged = stage(dist(site, "lb-plain"))
    assert {f for f in staged.files if not f.startswith("lb_plain-")} == {"lbplain/__init__.py", "lbplain/attack.py"}
    assert not layout(dist(site, "lb-plain")).editable


@pytest.mark.parametrize("route", ["link", "root", "home", "cwd", "not-a-package"])
def test_a_mapping_that_names_what_a_sandbox_never_sees_is_refused(site, tmp_path, monkeypatch, route):
    target = {"root": "/", "home": str(tmp_path / "home"), "cwd": str(tmp_path / "work"),
              "not-a-package": str(tmp_path / "data"), "link": str(tmp_path / "src" / "lbmap")}[route]  # fmt: skip
    for folder in ("home", "work", "data", "src"):
        (tmp_path / folder).mkdir()
    (tmp_path / "home" / "__init__.py").write_text("")
    (tmp_path / "work" / "__init__.py").write_text("")
    (tmp_path / "src" / "lbmap").symlink_to("/")
    monkeypatch.setenv("HOME", str(tmp_path / "home" / "user"))  # the mapped folder holds it
    monkeypatch.chdir(tmp_path / "work")
    install(site, "lb-map", finder={"lbmap": target}, top_level=("lbmap",), entry_points={"lb": "lbmap:X"})
    says = {"link": "is a link or goes through one", "root": "it is or holds the root", "home": "it is or holds the home",
            "cwd": "it is or holds the working directory", "not-a-package": "is not a package"}[route]  # fmt: skip
    with pytest.raises(StagingError, match=says) as err:
        stage(dist(site, "lb-map"))
    assert "\n" not in str(err.value) and str(err.value).startswith("distribution 'lb-map': ")


def test_an_editable_finder_is_read_as_data_never_run(site, tmp_path):
    src = editable_source(tmp_path / "proj", "lbfind", {"attack.py": "X = 1\n"})
    install(site, "lb-find", finder={"lbfind": str(src / "lbfind")}, top_level=("lbfind",),
            entry_points={"lb": "lbfind.attack:X"})
    finder = site / "__editable___lb_find_0_1_finder.py"
    marker = tmp_path / "ran"
    finder.write_text(f"open({str(marker)!r}, 'w').write('ran')\n" + finder.read_text())
    assert stage(dist(site, "lb-find")).provides("lbfind.attack") and not marker.exists()
    assert layout(dist(site, "lb-find")).pth_code == ("__editable__.lb_find-0.1.pth",)  # its .pth imports the finder


def test_a_distribution_over_its_bounds_is_refused(site, tmp_path, monkeypatch):
    src = editable_source(tmp_path / "proj", "lbbig", {f"m{i}.py": "" for i in range(5)})
    install(site, "lb-big", editable_src=src, top_level=("lbbig",), entry_points={"lb": "lbbig.m0:X"})
    monkeypatch.setattr(staging, "MAX_FILES", 3)
    with pytest.raises(StagingError, match="^distribution 'lb-big': more than 3 files$"):
        stage(dist(site, "lb-big"))
    monkeypatch.setattr(staging, "MAX_FILES", 100)
    monkeypatch.setattr(staging, "MAX_BYTES", 10)
    (src / "lbbig" / "m1.py").write_text("x" * 11)
    with pytest.raises(StagingError, match="^distribution 'lb-big': more than 10 bytes of files$"):
        stage(dist(site, "lb-big"))
