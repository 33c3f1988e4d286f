"""A private Ray head that does not come up (``ray start`` fails, or is still starting after its timeout) leaves the
link working without it: each run then starts a Ray of its own. Before, a ``ray start`` still running after 180 s
ended the command with a traceback (``subprocess.TimeoutExpired``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from leakbed import simulate
from leakbed.simulate import SimulationLink

# the link itself, as imported: the fast tier's guard (tests/conftest.py) refuses to construct one, and this one
# starts no simulation (its SuperLink and its Ray head are stand-ins)
LINK_INIT = SimulationLink.__init__


@pytest.mark.parametrize("ray_start", ["import sys; sys.exit(1)", "import time; time.sleep(60)"], ids=["fails", "hangs"])
def test_a_head_that_does_not_come_up_leaves_each_run_its_own_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray_start: str
) -> None:
    started: list[dict[str, str]] = []
    heads = []

    def start_ray(self: SimulationLink, logs: Path) -> tuple[object, str]:
        heads.append(self.start("ray-head", [sys.executable, "-c", ray_start], logs / "ray-head.log"))
        return heads[-1], "127.0.0.1:1"

    monkeypatch.setattr(SimulationLink, "__init__", LINK_INIT)
    monkeypatch.setattr(simulate, "RAY_HEAD_START_TIMEOUT", 2.0)
    monkeypatch.setattr(SimulationLink, "_start_ray", start_ray)
    monkeypatch.setattr(SimulationLink, "_start_superlink", lambda self: started.append(dict(self.env)))
    link = SimulationLink(tmp_path / "logs", own_ray=True)
    try:
        assert [env.get("RAY_ADDRESS") for env in started] == ["127.0.0.1:1", None]  # started again without it
        assert "RAY_ADDRESS" not in link.env
        assert heads[0].poll() is not None  # a `ray start` still running was stopped with the link's processes
    finally:
        link.stop()
    assert not link.home.exists()
