"""Shared fixtures: tiny, fast experiment configs and fake Flower messages."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Error, Message, Metadata, RecordDict

from core.config import ExperimentConfig, build_config
from tests.integration.procs import Procs, ray_head
from tests.schedule import TimingsRecorder, read_timings, schedule

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--write-timings",
        metavar="PATH",
        default="",
        help="write each unit of work's seconds to PATH (tests/timings.json orders the units under xdist)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--write-timings")
    if path and not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(TimingsRecorder(Path(path)), "leakbed-timings")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # units longest first under xdist (on its workers dist reads "no"); a run without xdist keeps its order
    if getattr(config, "workerinput", None) is not None:
        schedule(items, read_timings())


def tiny_config(*overrides: str) -> ExperimentConfig:
    """A few small synthetic users; enough for unit tests to train and attack in seconds."""
    base = [
        "data.synthetic.users=6",
        "data.synthetic.examples_per_user=40",
        "data.synthetic.image_size=8",
        "fl.rounds=2",
        "fl.fraction_train=0.5",
        "attack.workers=1",
        "attack.mlp_epochs=50",
    ]
    return build_config({}, [*base, *overrides])


class SharedRay:
    """One real Ray head for this test process's in-process simulations, started on first use.

    A simulation that joins a running head skips Ray's own start and stop (4.9 s of wall and about
    3 CPU-seconds here, against 0.8 s), which is also the start-up that fails on a loaded machine.
    The head has one CPU, so Flower's pool holds one ClientApp actor, as many as an xdist worker's
    share of the 2 cores gives (a simulation's numbers do not depend on it: tests/integration/
    test_fidelity.py checks one actor against two). Runs started as processes (``leakbed run``,
    ``flwr run``, the start-up fault tests) still start their own Ray.
    """

    def __init__(self, logs: Path) -> None:
        self.procs = Procs(logs)
        self.root: Path | None = None
        self.address = ""

    def join(self) -> str:
        if not self.address:
            self.root = Path(tempfile.mkdtemp(prefix="lkray-", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
            self.address = ray_head(self.procs, self.root / "head", 1)
        return self.address

    def stop(self) -> None:
        self.procs.stop_all()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _shared_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``ray.init`` without an address joins this process's shared head (``SharedRay``); an explicit
    address (the two-node cluster test) is kept."""
    import ray

    head, init = SharedRay(tmp_path_factory.mktemp("ray-head")), ray.init

    def joined(*args: object, **kwargs: object) -> object:
        kwargs.setdefault("address", head.join())
        return init(*args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(ray, "init", joined)
    try:
        yield
    finally:
        patch.undo()
        head.stop()


@pytest.fixture(autouse=True)
def _no_ray_outside_slow(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep ``pytest -m "not slow"`` a fast inner loop: a test that starts a Ray simulation must be
    marked ``slow``, and one that is not fails at once here instead of quietly taking minutes."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} starts Ray but is not marked @pytest.mark.slow")

    monkeypatch.setattr("flwr.simulation.run_simulation", refuse)
    monkeypatch.setattr("ray.init", refuse)


@pytest.fixture
def tiny_cfg() -> ExperimentConfig:
    return tiny_config()


def fake_message(
    content: RecordDict | None, *, src: int = 11, dst: int = 0, message_type: str = "train", error: str = ""
) -> Message:
    """A message as if it had crossed the SuperLink (metadata filled in); ``error`` makes a failed reply."""
    meta = Metadata(
        run_id=1,
        message_id=f"m{src}-{dst}",
        src_node_id=src,
        dst_node_id=dst,
        reply_to_message_id="i",
        group_id="1",
        created_at=time.time(),
        ttl=60,
        message_type=message_type,
    )
    if error:
        return Message(error=Error(code=0, reason=error), metadata=meta)
    return Message(content=content, metadata=meta)


def arrays_of(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord keyed like a state_dict."""
    return ArrayRecord(torch_state_dict={k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()})
