"""Launch one FL run in Flower's Simulation Engine (Ray backend)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from core.config import ExperimentConfig
from core.data import federation
from core.derive import derived_seed
from core.layout import RunLayout
from core.processes import descendants, terminate

log = logging.getLogger(__name__)


@contextlib.contextmanager
def seeded_node_ids(seed: int) -> Iterator[None]:
    """Make the simulated SuperLink's node ids a function of the seed.

    Flower draws node ids from ``secrets``; the server samples devices by node id, so without
    this the same seed would sample different users. Only the in-process simulation is patched.
    """
    from flwr.server.superlink.linkstate import in_memory_linkstate as state

    original = state.generate_rand_int_from_bytes
    rng = random.Random(f"leakbed-node-ids/{derived_seed(seed, 'node-ids')}")

    def seeded(num_bytes: int, exclude: set[int] | None = None) -> int:
        while True:
            value = rng.getrandbits(8 * num_bytes)
            if value and (exclude is None or value not in exclude):
                return value

    state.generate_rand_int_from_bytes = seeded
    try:
        yield
    finally:
        state.generate_rand_int_from_bytes = original


START_ATTEMPTS = 3  # a run that left no results (Ray failed to start) is started again, at most twice


class SimulationFailed(RuntimeError):
    """Every start of a prior's simulation ended without results (the CLI's one-line error, exit 1)."""


def _shutdown_ray() -> None:
    """Forget a half-started Ray in this process, so the next start begins clean."""
    import ray

    try:
        if ray.is_initialized():
            ray.shutdown()
    except Exception as err:  # noqa: BLE001 - a dead runtime may fail its own shutdown; the retry goes on
        log.warning("ray.shutdown after a failed start: %s", err)


def backend_config(cfg: ExperimentConfig) -> dict:
    """Flower's Ray backend settings: resources per ClientApp actor, and the Ray to start or join.

    With ``simulation.ray_address`` set, ``ray.init(address=...)`` joins that cluster instead of
    starting a private Ray: Flower sizes its actor pool from every node's CPUs/GPUs, and its
    ``ray.shutdown()`` at the end (and ours before a retried start) only disconnects this driver,
    never stopping the user's cluster.
    """
    init_args: dict = {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False}
    if cfg.simulation.ray_address:
        init_args["address"] = cfg.simulation.ray_address
    return {
        "client_resources": {"num_cpus": cfg.simulation.client_cpus, "num_gpus": cfg.simulation.client_gpus},
        "init_args": init_args,
    }


def simulate(
    cfg: ExperimentConfig, rule: str, run_dir: Path, progress: Callable[[int, dict[str, float]], None] | None = None
) -> dict:
    """Run the ServerApp and one virtual SuperNode per user, one prior of ``cfg`` into the run
    folder ``run_dir`` (see ``core.layout``); returns the prior's summary."""
    import json

    from flwr.simulation import run_simulation

    from client.app import app as client_app
    from leakbed.apps import bound_server_app
    from server.cancel import RunControl

    layout = RunLayout(run_dir)
    users = len(federation(cfg, rule).user_ids)
    path = layout.results(rule) / "metrics.json"
    last: BaseException | None = None
    for attempt in range(START_ATTEMPTS):
        control = RunControl()
        before = set(descendants(os.getpid()))
        try:
            with seeded_node_ids(cfg.seed):
                run_simulation(
                    server_app=bound_server_app(cfg, rule, layout, progress, control),
                    client_app=client_app,
                    num_supernodes=users,
                    backend_config=backend_config(cfg),
                )
        except RuntimeError as err:  # Flower re-raises a crashed Simulation Runtime (e.g. Ray's start-up) this way
            log.warning("simulation of the %s prior crashed: %s", rule, err)
            last = err
            while last.__cause__ is not None:  # Flower wraps the runtime's own error ("Simulation Runtime crashed.")
                last = last.__cause__
        if path.exists():
            break
        # The failed attempt is ended whole before anything else: its ServerApp thread (it may still wait
        # on the dead runtime), its Ray, and every process it started (Ray's GCS, dashboard and monitors,
        # attack workers), which Ray kills without waiting and which outlive the run on a loaded machine.
        control.abandon()
        _shutdown_ray()
        terminate(set(descendants(os.getpid())) - before)
        if attempt + 1 == START_ATTEMPTS:
            break
        # Ray's raylet or GCS sometimes fails to come up on a busy 2-core machine; the run is
        # seeded, so a clean second start gives the very same numbers.
        log.warning("the %s prior left no results; starting it again from scratch", rule)
        for folder in (layout.results(rule), layout.store(rule), layout.referee(rule)):
            shutil.rmtree(folder, ignore_errors=True)
    if not path.exists():
        why = f": {str(last).splitlines()[0]}" if last else " (see the log above)"
        raise SimulationFailed(f"the simulation of the {rule} prior ended without results after {START_ATTEMPTS} starts{why}")
    return json.loads(path.read_text())
