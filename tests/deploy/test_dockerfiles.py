"""The app images: hadolint-clean, built from the installed package with its exact pins, matching the compose files."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from leakbed import images
from tests.deploy.tools import DEPLOY, REPO, hadolint, run

DOCKERFILES = sorted((DEPLOY / "docker").glob("*.Dockerfile"))
BASE_DOCKERFILES = sorted((DEPLOY / "base").glob("*.Dockerfile"))  # the offline bases (leakbed.images)
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def flwr_version() -> str:
    pins = [d for d in PYPROJECT["project"]["dependencies"] if d.startswith("flwr[") or d.startswith("flwr==")]
    assert len(pins) == 1
    return pins[0].split("==")[1]


def test_there_is_a_cpu_and_a_cuda_image() -> None:
    assert [p.name for p in DOCKERFILES] == ["app-cuda.Dockerfile", "app.Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES + BASE_DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(path: Path) -> None:
    out = run([hadolint(), str(path)])
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\nRUN cd /tmp\n")
    out = run([hadolint(), str(bad)])
    assert out.returncode != 0 and "DL3007" in out.stdout


def test_every_dependency_is_pinned_exactly() -> None:
    """The images install the installed leakbed's requirements (pyproject.toml's dependencies), so those pins are the
    images' pins."""
    extras = PYPROJECT["project"].get("optional-dependencies", {})
    for dep in [*PYPROJECT["project"]["dependencies"], *extras.get("build", [])]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[0-9][A-Za-z0-9.+\-]*", dep), dep


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_image_installs_the_staged_package_and_nothing_else(path: Path) -> None:
    """The context is what ``leakbed.build_context`` stages from the installed package (the pins, the wheels): the
    image copies exactly that, never a checkout's folders."""
    text = path.read_text()
    copied = re.findall(r"^COPY --chown=\S+ (\S+) ", text, re.M)
    assert copied == ["requirements.txt", "wheels"]
    assert "python -m pip install --no-cache-dir --no-deps wheels/*.whl" in text
    assert re.search(r"^USER 49999", text, re.M) and re.search(r"^ENTRYPOINT \[\"flower-superexec\"\]", text, re.M)
    assert not list(path.parent.glob("*.dockerignore"))  # nothing to leave out: the staged context holds only these


def test_images_follow_the_pinned_flower_version() -> None:
    version = flwr_version()
    cpu = (DEPLOY / "docker/app.Dockerfile").read_text()
    assert f"ARG BASE_IMAGE=flwr/superexec:{version}-py3.11-" in cpu and "FROM ${BASE_IMAGE}" in cpu
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in cpu
    assert "ARG BASE_IMAGE=python:3.11." in (DEPLOY / "docker/app-cuda.Dockerfile").read_text()
    assert f"ARG FLWR_VERSION={version}" in (DEPLOY / "base/flwr.Dockerfile").read_text()
    assert images.FLWR_VERSION == version and images.OFFICIAL.superexec.removeprefix("docker.io/") in cpu
    files = [DEPLOY / "docker-compose.yml", DEPLOY / "compose.tls.yml", DEPLOY / "compose.gpu.yml"]
    apps = set()
    for f in files:
        for svc in yaml.safe_load(f.read_text())["services"].values():
            image = svc.get("image", "")
            if image.startswith("flwr/"):
                assert image.endswith(f":${{FLWR_VERSION:-{version}}}"), image
            assert "build" not in svc  # the app images are built by `leakbed compose build`, from the installed package
            if image.startswith("localhost/leakbed-app"):
                apps.add(image.replace("${LEAKBED_VERSION:-", "").rstrip("}"))
    assert apps == {images.APP_IMAGE, images.APP_CUDA_IMAGE}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dependency_layer_depends_on_the_pins_alone(path: Path) -> None:
    """A code change must not re-install torch (GBs): the install step sees only the list of pins (the staged
    ``requirements.txt``), and the installer's cache (uv's in the CPU image, pip's in the CUDA one) sits in a cache
    mount for when a pin changes; the package comes after."""
    text = path.read_text()
    final = text[text.rindex("\nFROM ") :]
    deps = final.index("-r requirements.txt")
    step = final[final.rindex("\nRUN ", 0, deps) : deps]
    cache = re.search(r"--mount=type=cache,target=(/tmp/(?:pip|uv)-cache)", step)
    assert cache and f"--cache-dir {cache.group(1)}" in step, step  # the install writes its cache into the mount
    assert re.findall(r"^COPY .*$", final[:deps], re.M) == ["COPY --chown=app:app requirements.txt ./"]
    assert "COPY --chown=app:app wheels wheels" in final[deps:]
