"""The Deployment Engine for real: one SuperLink and two SuperNodes on 127.0.0.1, then ``flwr run``.

Everything runs as separate processes with a private FLWR_HOME, free ports and a SQLite state
file in the test's tmp folder; every process (and whatever it spawned) is stopped afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.procs import (
    VENV_BIN,
    Procs,
    assert_run_completed,
    check_run_dir,
    flower_env,
    flwr_run,
    free_ports,
    http_ok,
    wait_until,
    write_connection,
)

CONNECTION = "local-deployment"


@pytest.mark.slow
def test_two_supernodes_over_flwr_run(tmp_path: Path, procs: Procs) -> None:
    home, run = tmp_path / "flwr-home", tmp_path / "run"
    link_port, node0_port, node1_port = free_ports(3)
    link = f"127.0.0.1:{link_port}"
    write_connection(home, CONNECTION, f'address = "{link}"\ninsecure = true')
    env = flower_env(home)

    procs.start(
        "superlink",
        [
            str(VENV_BIN / "flower-superlink"),
            "--insecure",
            "--host",
            "127.0.0.1",
            "--port",
            str(link_port),
            "--disable-runtime-dependency-installation",
            "--database",
            str(tmp_path / "superlink.db"),
        ],
        env,
    )
    wait_until(lambda: http_ok(f"http://{link}/health"), 60, f"SuperLink /health on {link}", procs)
    for pid, port in enumerate((node0_port, node1_port)):
        procs.start(
            f"supernode{pid}",
            [
                str(VENV_BIN / "flower-supernode"),
                "--insecure",
                "--superlink",
                link,
                "--port",
                str(port),
                "--node-config",
                f"partition-id={pid} num-partitions=2",
            ],
            env,
        )

    t0 = time.monotonic()
    try:
        flwr_run(procs, CONNECTION, run, env)
        elapsed = time.monotonic() - t0
        assert_run_completed(procs, CONNECTION, env)

        check_run_dir(run, "random")
        print(f"\n[deployment] flwr run took {elapsed:.1f}s")
    except AssertionError:
        print(procs.tails(60))
        raise
