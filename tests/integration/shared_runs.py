"""Simulations that more than one integration module reads, made once per test session.

A module fixture is built once per worker; a run that two modules' assertions read would be made once in each
worker that runs either module. ``shared_run`` makes it once for the whole session: under a file lock in the
folder every xdist worker's base temp folder lies in (the session's own base temp folder without xdist), the first
worker to ask simulates and files the metrics, and every later ask, from any worker, reads them back. Runs are
seeded and every worker's simulations run alike (one ClientApp actor on its own one-CPU Ray head:
``tests.conftest.SharedSimulation``; test_fidelity.py checks that the actor count changes no number), so the numbers
do not depend on which worker made the run. A run that failed leaves no metrics, and the next ask makes it again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from leakbed.simulate import simulate
from tests.conftest import tiny_config

# The biased synthetic federation at a small, fast scale: 24 users of 100 examples, 8 rounds of 6 devices
SMALL = [
    "data.synthetic.users=24",
    "data.synthetic.examples_per_user=100",
    "data.synthetic.image_size=16",
    "fl.rounds=8",
    "fl.fraction_train=0.25",
    "fl.lr=0.1",
    "attack.params.mlp.epochs=100",
]
TRAINED = ["fl.local_epochs=5", "fl.lr=0.05"]  # as leakbed/configs/sweep-synthetic.toml
# SMALL, trained as the sweep trains (the model learns, so utility is not noise), undefended, the random prior:
# test_fidelity.py's biased run and test_defenses.py's undefended one
BIASED = [*SMALL, *TRAINED]


def _root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"


def shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, overrides: list[str], rule: str = "random") -> dict:
    """The metrics of ``simulate(tiny_config(*overrides), rule, ...)``, made once in the session under ``name``."""
    root = _root(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    run_dir, done = root / name, root / f"{name}.json"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            kept = json.loads(done.read_text())
            assert kept["overrides"] == overrides and kept["rule"] == rule, f"two runs named {name!r}"
            return kept["metrics"]
        shutil.rmtree(run_dir, ignore_errors=True)  # what a failed attempt left
        metrics = simulate(tiny_config(*overrides), rule, run_dir)
        done.write_text(json.dumps({"overrides": overrides, "rule": rule, "metrics": metrics}))
        return metrics


def biased_random(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The ``BIASED`` federation's random prior (metrics.json)."""
    return shared_run(tmp_path_factory, "biased-random", BIASED)
