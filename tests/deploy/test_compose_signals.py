"""Stop when told, in containers: SIGINT (Ctrl-C, to the whole foreground job) or SIGTERM (to leakbed alone) while
``leakbed compose up`` waits for its stack brings down everything it started (``leakbed.stack.up``'s ``down``): no
container, network or volume of the project, no process naming it (the compose binary, Podman's ``conmon`` of each
container), no rendered folder. A stack that came up is left running on purpose (``compose down`` removes it); this is
the interrupted one.

Real containers on Docker or Podman's Docker API, as ``test_containers.py``: a missing engine skips here and fails in
CI. The images are the container tests' (one build per machine; what this checks is leakbed's process on the host, not
the images' content).
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

from leakbed import images, stack
from leakbed.engine import Engine
from tests.deploy import test_containers as containers
from tests.integration.procs import VENV_BIN, free_ports
from tests.integration.test_signals import _start, _stop, _wait_for

pytestmark = [pytest.mark.containers, pytest.mark.slow]
STOPPED_WITHIN = 10.0  # [s] the bound; an interrupted start takes the stack down with `compose down -t 0`


# the container tests' fixtures: the engine, and the images built once per machine (under leakbed's build lock)
engine, chosen = containers.engine, containers.chosen


def _containers(engine: Engine, project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    return engine.run("ps", "-a", "--filter", label, "--format", "{{.Names}}", check=False).stdout.split()


def _naming(project: str) -> list[str]:
    """Every live process whose command line names the project: the compose binary, each container's conmon."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if project in cmdline and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{p.info['pid']} {cmdline[:160]}")
    return found


@pytest.mark.parametrize(
    ("sig", "to_group", "phase"),
    [(signal.SIGINT, True, "starting"), (signal.SIGTERM, False, "waiting"), (signal.SIGHUP, False, "waiting")],
    ids=["INT-starting", "TERM-waiting", "HUP-waiting"],  # each signal once, each phase: minutes of containers each
)  # fmt: skip
def test_an_interrupted_compose_up_takes_down_what_it_started(
    engine: Engine, chosen: images.Images, tmp_path: Path, sig: signal.Signals, to_group: bool, phase: str
) -> None:
    """``starting``: its first container exists (``compose up -d`` is creating and starting the others);
    ``waiting``: every service runs, and it waits for the SuperLink to answer (seconds: its Python starting)."""
    project = f"leakbed-sig-{sig.name[3:].lower()}-{uuid.uuid4().hex[:6]}"
    s = stack.Stack(project, supernodes=1, workers=1, tls=False)
    link, prom, graf = free_ports(3)
    log = tmp_path / "cli.log"
    argv = [str(VENV_BIN / "leakbed"), "compose", "up", "--no-build", "--base", chosen.base, "--project", project,
            "--ports", f"{link},{prom},{graf}", "--supernodes", "1", "--workers", "1"]  # fmt: skip
    proc = _start(argv, log)
    try:
        t0 = time.monotonic()
        if phase == "starting":
            _wait_for(lambda: bool(_containers(engine, project)), 300, "the stack's first container", proc, log)
        else:
            _wait_for(lambda: "running: " in log.read_text(), 300, "its services running", proc, log)
        waited = time.monotonic() - t0
        seconds = _stop(proc, sig, to_group)
        left, processes = stack.leftovers(engine, project), _naming(project)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stack.down(engine, s)  # whatever the assertions below say, nothing of it stays
    text = log.read_text()
    print(f"\n[signals] compose up {sig.name} {phase}, {waited:.1f} s after it started: stopped in {seconds:.1f} s, left {left}")
    assert proc.returncode == 128 + sig, (proc.returncode, text[-3000:])
    assert seconds < STOPPED_WITHIN, f"stopped after {seconds:.1f} s"
    assert left == [], left
    assert processes == [], processes
    assert not s.folder.exists(), f"its rendered folder {s.folder} is still there"
    assert "stopped: the stack is down" in text and f"leakbed: stopped by {sig.name}" in text, text[-3000:]
