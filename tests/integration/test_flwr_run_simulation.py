"""``flwr run`` on the Simulation Runtime: the path a user takes with a ``:local:`` connection.

``flwr`` starts a managed background SuperLink (``--simulation``) that outlives the run. The test
points it at free ports and a private FLWR_HOME, and afterwards stops exactly the SuperLink(s)
that appeared during the test and name that FLWR_HOME (plus everything they spawned: SuperExec,
the simulation process, Ray), never another SuperLink on the machine.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.integration.procs import (
    Procs,
    assert_run_completed,
    check_run_dir,
    find_pids,
    flower_env,
    flwr_run,
    free_ports,
    write_connection,
)

CONNECTION = "local-sim"
FEDERATION_CONFIG = "num-supernodes=2 client-resources-num-cpus=1"


@pytest.mark.slow
def test_flwr_run_local_simulation(tmp_path: Path, procs: Procs) -> None:
    home, run = tmp_path / "flwr-home", tmp_path / "run"
    http_port, control_port = free_ports(2)
    write_connection(home, CONNECTION, 'address = ":local:"')
    # flwr reads these when it starts the managed SuperLink: keep off the default 39091/39093,
    # which a developer's own local SuperLink (with another FLWR_HOME) may hold.
    env = flower_env(home, FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http_port), FLWR_LOCAL_CONTROL_API_PORT=str(control_port))

    t0 = time.monotonic()
    try:
        flwr_run(procs, CONNECTION, run, env, ["--federation-config", FEDERATION_CONFIG])
        elapsed = time.monotonic() - t0
        managed = find_pids(rf"flower-superlink.*--simulation.*{re.escape(str(home))}")
        assert managed, "flwr run did not leave the expected managed SuperLink behind"
        assert_run_completed(procs, CONNECTION, env)

        check_run_dir(run, "random")
        print(f"\n[simulation] flwr run took {elapsed:.1f}s")
    except AssertionError:
        print(procs.tails(60))
        superlink_log = home / "local-superlink" / "superlink.log"
        if superlink_log.exists():
            print(f"----- {superlink_log} -----\n" + "\n".join(superlink_log.read_text(errors="replace").splitlines()[-60:]))
        raise
