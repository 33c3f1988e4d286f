"""Podman's API service is one per machine and reads leakbed's containers.conf (the seccomp profile by its absolute
path) once, at start: a service that another checkout started is found stale and restarted, never reused (a suite in
a second clone once failed every container test: "opening seccomp profile failed: open /work/<first clone>/...")."""

from __future__ import annotations

import json
import os
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
