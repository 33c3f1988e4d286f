"""Podman's API service is one per machine and reads leakbed's containers.conf (the seccomp profile by its absolute
path) once, at start: a service that another checkout started is found stale and restarted, never reused (a suite in
a second clone once failed every container test: "opening seccomp profile failed: open /work/<first clone>/...")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakbed import engine


@pytest.fixture
def service(tmp_path: Path):
    """A stand-in for ``podman system service ... unix://<socket>`` (only its command line matters here)."""
    sock = tmp_path / "leakbed-podman.sock"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "system", "service", f"unix://{sock}"])
    yield sock, proc
    proc.kill()
    proc.wait()


def conf(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "leakbed-containers.conf"
    path.write_text(text)
    return {"CONTAINERS_CONF": str(path)}


def test_a_service_started_with_other_settings_is_stale_and_is_stopped(tmp_path, service):
    sock, proc = service
    engine._read_by(sock).write_text(json.dumps({"pid": proc.pid, "conf": 'seccomp_profile = "/elsewhere/a.json"'}))
    ours = conf(tmp_path, 'seccomp_profile = "/here/a.json"')
    assert engine._stale_service(sock, ours) == proc.pid
    engine._stop_service(proc.pid)
    assert proc.poll() is not None


def test_a_service_started_with_these_settings_is_reused(tmp_path, service):
    sock, proc = service
    ours = conf(tmp_path, 'seccomp_profile = "/here/a.json"')
    engine._read_by(sock).write_text(json.dumps({"pid": proc.pid, "conf": 'seccomp_profile = "/here/a.json"'}))
    assert engine._stale_service(sock, ours) is None


def test_without_its_record_a_service_is_stale_only_if_the_settings_changed_after_it_started(tmp_path, service):
    sock, proc = service
    ours = conf(tmp_path, "older")
    os.utime(ours["CONTAINERS_CONF"], (time.time() - 3600,) * 2)  # written before the service started
    assert engine._stale_service(sock, ours) is None  # the settings it read are the ones on disk
    Path(ours["CONTAINERS_CONF"]).write_text("rewritten by another checkout")
    assert engine._stale_service(sock, ours) == proc.pid


@pytest.mark.slow
def test_the_podman_service_leakbed_starts_ends_itself_when_idle_and_comes_back_when_needed(tmp_path, monkeypatch):
    """The service used to run with ``--time=0``: started for the container tests, it ran as root for hours after the
    suite had ended. It now ends itself after ``PODMAN_IDLE_S`` seconds without a request (2 here), its socket with it,
    and the next compose call starts it again (``Engine.ready``)."""
    import psutil

    from tests.deploy.tools import missing

    if not shutil.which("podman"):
        missing("podman", "apt-get install podman runc")
    sock = tmp_path / "leakbed-podman.sock"  # a service of this test's own, beside the machine's
    monkeypatch.setattr(engine, "podman_socket", lambda: sock)
    monkeypatch.setattr(engine, "PODMAN_IDLE_S", 2)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    found = engine._podman()
    assert found is not None and found.env["DOCKER_HOST"] == f"unix://{sock}"
    assert any("started its Docker API" in note for note in found.notes), found.notes
    first = json.loads(engine._read_by(sock).read_text())["pid"]
    services = [first]
    try:
        assert "--time=2" in psutil.Process(first).cmdline() and engine.api_answers(sock)
        t0 = time.monotonic()
        psutil.Process(first).wait(timeout=60)  # idle from here on: it ends itself
        idle = time.monotonic() - t0
        assert 1.0 <= idle < 30, f"ended {idle:.1f} s after its last request"
        assert not sock.exists() and not engine.api_answers(sock)
        assert found.ready() is found and engine.api_answers(sock)  # what every compose call does first
        again = json.loads(engine._read_by(sock).read_text())["pid"]
        services.append(again)
        assert again != first and "--time=2" in psutil.Process(again).cmdline()
        assert found.compose_run("ls", "--format", "json").returncode == 0  # compose reaches the API it restarted
        psutil.Process(again).wait(timeout=60)
        assert not sock.exists()
    finally:
        for pid in services:
            if psutil.pid_exists(pid):
                engine._stop_service(pid)
