"""``simulation.ray_address`` / ``--ray-address`` (issue 14.1) without a cluster: validation, the
one-line refusal of an address where no Ray head answers, and what reaches Flower's backend.
The run itself is replaced by a tripwire; the real two-node cluster is the Ray cluster tutorial's
(``tests/docs/test_tutorials.py::test_ray_cluster``)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

import leakbed.cli as cli
from leakbed.cluster import ray_head_problem
from leakbed.commands import experiment
from leakbed.core.config import ConfigError, build_config
from leakbed.core.processes import free_port
from leakbed.simulate import SimulationLink, federation_config
from leakbed.sweep import sweep_spec

LINK_INIT = SimulationLink.__init__  # before tests.conftest keeps non-slow tests from starting simulations

TINY = ["data.synthetic.users=6", "data.synthetic.examples_per_user=40", "fl.rounds=1", "workers.count=1"]


@pytest.fixture(autouse=True)
def _tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bad Ray address got through: a run started")

    monkeypatch.setattr(experiment, "run_experiment", started)


@pytest.mark.parametrize("address", ["head", "ray://head:10001", "head:port", "10.0.0.1:6379 x"])
def test_malformed_address_is_a_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match=r"^simulation\.ray_address: .*not host:port"):
        build_config({}, [f"simulation.ray_address='{address}'"])


def test_the_simulation_joins_a_cluster_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private Ray is started quiet; a cluster is joined through RAY_ADDRESS in the SuperLink's environment
    (its Simulation Runtime's ``ray.init()`` reads it) and keeps its own settings."""
    assert federation_config(build_config({}, []), 4)["init-args-logging-level"] == "ERROR"
    joined = federation_config(build_config({}, ["simulation.ray_address=10.0.0.5:6379", "simulation.client_gpus=0.25"]), 4)
    assert "init-args-logging-level" not in joined and joined["client-resources-num-gpus"] == 0.25
    started = []

    class NoSuperLink:
        def __init__(self, *args: object, **kwargs: object) -> None:
            started.append(kwargs["env"])
            raise OSError("not started in this test")

    monkeypatch.setattr("leakbed.simulate.subprocess.Popen", NoSuperLink)
    monkeypatch.setattr(SimulationLink, "__init__", LINK_INIT)
    for address in ("10.0.0.5:6379", ""):
        with pytest.raises(OSError):
            SimulationLink(Path("/tmp/leakbed-test-logs"), address)
    assert started[0]["RAY_ADDRESS"] == "10.0.0.5:6379" and "RAY_ADDRESS" not in started[1]


def test_the_cluster_does_not_identify_a_sweep_point() -> None:
    """A seeded point gives the same numbers on any cluster: a sweep may be resumed on another one."""
    local = build_config({}, TINY)
    remote = build_config({}, [*TINY, "simulation.ray_address=10.0.0.5:6379"])
    other = build_config({}, [*TINY, "fl.rounds=2"])
    assert sweep_spec({"p": local}) == sweep_spec({"p": remote}) != sweep_spec({"p": other})


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_unreachable_cluster_stops_before_anything_starts(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    out = tmp_path / "out"
    grid = ["--grid", "fl.rounds=1,2"] if command == "sweep" else []
    t0 = time.monotonic()
    code = cli.main([command, *(a for s in TINY for a in ("--set", s)), *grid, "--ray-address", address, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert time.monotonic() - t0 < 30  # refused at once, not after Ray's minutes of retries
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"leakbed: error: simulation.ray_address = '{address}': cannot reach it"), err
    assert not out.exists()


def test_a_port_that_is_not_a_ray_head_is_refused() -> None:
    """Something answers TCP there (here: a socket that accepts and hangs up) but no GCS health check."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        for _ in range(8):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        problem = ray_head_problem(f"127.0.0.1:{port}", timeout=3.0)
    finally:
        server.close()
    assert problem is not None and problem.startswith("it answers but is not a Ray head's GCS"), problem
