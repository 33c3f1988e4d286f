"""Shared fixtures: tiny, fast experiment configs and fake Flower messages."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Error, Message, Metadata, RecordDict

from leakbed.core.config import ExperimentConfig, build_config
from tests.integration.procs import Procs, ray_head
from tests.schedule import TimingsRecorder, read_timings, schedule

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("core", "defenses", "client", "attacks", "workers", "referee", "server", "studies")


def room_of(module: str) -> str:
    """The room a dotted module name lies in (``leakbed.core.x`` -> ``core``; the product's own -> ``leakbed``), or
    its top-level name when it is not ours (``flwr.server`` -> ``flwr``)."""
    parts = module.split(".")
    if parts[0] != "leakbed":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "leakbed"


# The real corpora (FEMNIST, Shakespeare) beside the checkout; LEAKBED_TEST_DATA points the tests elsewhere.
SHARED_DATA = Path(os.environ.get("LEAKBED_TEST_DATA") or REPO.parent / "shared" / "data")
NO_SHARED_DATA = f"needs the shared data (../shared/data, or LEAKBED_TEST_DATA), absent at {SHARED_DATA}"


def shared_data_reason(names: tuple[str, ...]) -> str:
    """Why a test marked ``shared_data(*names)`` skips here, or "" when it may run: one reason for every such test
    where the data root is absent (a fresh clone without ../shared), the missing corpus where only it is."""
    if not SHARED_DATA.is_dir():
        return NO_SHARED_DATA
    missing = [n for n in names if not (SHARED_DATA / n).is_dir()]
    return f"needs {', '.join(missing)} under {SHARED_DATA}" if missing else ""


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


@pytest.hookimpl(tryfirst=True)  # before -m selects: "fast" must be on the items by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the unit tier: every test neither slow, long nor containers is "fast" (pytest -m fast, the inner loop)
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("slow", "long", "containers")):
            item.add_marker(pytest.mark.fast)
    # units longest first under xdist (on its workers dist reads "no"); a run without xdist keeps its order
    if getattr(config, "workerinput", None) is not None:
        schedule(items, read_timings())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``shared_data("femnist")`` skips, before any fixture of it is built, where the data is absent."""
    names = tuple(n for mark in item.iter_markers("shared_data") for n in mark.args)
    if names and (reason := shared_data_reason(names)):
        pytest.skip(reason)


def tiny_config(*overrides: str) -> ExperimentConfig:
    """A few small synthetic users; enough for unit tests to train and attack in seconds."""
    base = [
        "data.synthetic.users=6",
        "data.synthetic.examples_per_user=40",
        "data.synthetic.image_size=8",
        "fl.rounds=2",
        "fl.fraction_train=0.5",
        "workers.count=1",
    ]
    cfg = build_config({}, [*base, *overrides])
    if "mlp" in cfg.attack.suite and "mlp" not in cfg.attack.params:  # a quicker MLP than the seed's 100 epochs
        cfg = build_config({}, [*base, *overrides, "attack.params.mlp.epochs=50"])
    return cfg


def device_round(cfg: ExperimentConfig, partition: int, rnd: int = 1, train: object = None, rule: str = "random"):  # noqa: ANN201
    """The ``client.plan.DeviceRound`` a device of ``cfg`` handles in round ``rnd`` (its plan as the server sends it)."""
    from leakbed.client.plan import DeviceRound
    from leakbed.core.data import federation
    from leakbed.core.training import TrainConfig
    from leakbed.server.plan import device_plan

    plan = device_plan(cfg, rule, federation(cfg, rule).user_ids)
    return DeviceRound(plan, partition, rnd, train if train is not None else TrainConfig.of(cfg.fl))


class SharedSimulation:
    """One real Ray head and one simulation SuperLink joined to it, for this test process, started on first use.

    Every ``leakbed.simulate.simulate`` of the process is submitted to this SuperLink (``shared_link``), whose
    Simulation Runtime joins the head (``RAY_ADDRESS``) instead of starting its own Ray: it skips Ray's start
    and stop (4.9 s of wall and about 3 CPU-seconds here, against 0.8 s), which is also the start-up that fails
    on a loaded machine, and the SuperLink's own start. The head has one CPU, so Flower's pool holds one
    ClientApp actor, as many as an xdist worker's share of the 2 cores gives (a simulation's numbers do not
    depend on it: tests/integration/test_fidelity.py checks one actor against two). Runs started as processes
    (``leakbed run``, ``flwr run``, the start-up fault tests) and runs naming a cluster start their own.
    """

    def __init__(self, logs: Path) -> None:
        self.procs = Procs(logs)
        self.logs = logs
        self.root: Path | None = None
        self.link = None
        self._shared = None

    def start(self) -> None:
        from leakbed.simulate import SimulationLink, shared_link

        if self.link is None:
            self.root = Path(tempfile.mkdtemp(prefix="lkray-", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
            address = ray_head(self.procs, self.root / "head", 1)
            self.link = SimulationLink(self.logs / "superlink", address)
            self._shared = shared_link(self.link)
            self._shared.__enter__()

    def stop(self) -> None:
        if self.link is not None:
            self._shared.__exit__(None, None, None)
            self.link.stop()
        self.procs.stop_all()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _shared_simulation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedSimulation]:
    """Slow tests that simulate share this process's Ray head and SuperLink (``SharedSimulation``)."""
    shared = SharedSimulation(tmp_path_factory.mktemp("simulation"))
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(scope="session", autouse=True)
def _flower_deprecations_are_warnings() -> Iterator[None]:
    """Flower logs its deprecation notices; here they are ``FlowerDeprecationWarning``s, which pyproject.toml's
    filterwarnings makes errors (runs in a Simulation Runtime are checked by ``leakbed.simulate``)."""
    import logging

    from leakbed.deprecations import AsWarning

    flower, notice = logging.getLogger("flwr"), AsWarning()
    flower.addFilter(notice)
    yield
    flower.removeFilter(notice)


@pytest.fixture(autouse=True)
def _simulations_only_when_slow(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep ``pytest -m "not slow"`` a fast inner loop: a test that starts a simulation must be marked ``slow``,
    and one that is not fails at once here instead of quietly taking minutes."""
    from leakbed import simulate

    if request.node.get_closest_marker("slow"):
        request.getfixturevalue("_shared_simulation").start()
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} starts a simulation but is not marked @pytest.mark.slow")

    monkeypatch.setattr(simulate.SimulationLink, "__init__", refuse)
    monkeypatch.setattr("ray.init", refuse)


EXAMPLE_PLUGIN = REPO / "examples" / "leakbed-example-plugin"


@pytest.fixture(scope="session")
def example_plugin() -> Path:
    """The example plugin package (its own pyproject.toml, outside leakbed's packages) pip-installed into this
    environment, as a researcher installs theirs: every process of a run (SuperLink, Simulation Runtime, Ray actors,
    sandboxed attack workers, deploy-local's processes) finds it through its entry points. Installed once under a
    machine-wide lock (xdist workers share the environment) and left installed."""
    import fcntl
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version

    with open("/tmp/leakbed-example-plugin.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            version("leakbed-example-plugin")
        except PackageNotFoundError:
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(EXAMPLE_PLUGIN)]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
    from leakbed.attacks import registry as attacks
    from leakbed.defenses import registry as defenses

    attacks.attack.cache_clear()
    defenses.defense.cache_clear()
    return EXAMPLE_PLUGIN


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
