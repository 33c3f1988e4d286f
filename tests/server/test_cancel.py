"""A ServerApp left waiting on a crashed Simulation Runtime ends when its launcher cancels it."""

import threading
import time

import pytest
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from server.cancel import RunCancelled, RunControl, cancellable, controlled_main


class _DeadRuntimeGrid:
    """Accepts messages and never answers, like the in-memory grid of a runtime that died."""

    pull_interval = 0.01

    def __init__(self) -> None:
        self.pulls = 0

    def push_messages(self, messages):
        return ["m-1"]

    def pull_messages(self, message_ids):
        self.pulls += 1
        return []


def _wait_forever(grid) -> None:
    InMemoryGrid.send_and_receive(grid, ["message"], timeout=None)  # Flower's own loop, no timeout


def test_a_cancelled_run_stops_waiting_and_writes_nothing():
    grid, control, raised, wrote = _DeadRuntimeGrid(), RunControl(), [], []

    def main(g) -> None:
        _wait_forever(g)
        wrote.append("metrics.json")

    def thread_body() -> None:
        try:
            controlled_main(main, grid, control)
        except RunCancelled as err:
            raised.append(err)

    thread = threading.Thread(target=thread_body, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive() and grid.pulls > 5 and control.started.is_set()
    control.abandon(wait_seconds=10)
    thread.join(5)
    assert not thread.is_alive() and control.done.is_set()
    assert len(raised) == 1 and not wrote


def test_without_a_control_the_main_runs_as_is_and_an_unstarted_run_is_not_waited_for():
    seen = []
    controlled_main(lambda g: seen.append(g), "grid", None)
    assert seen == ["grid"]
    t0 = time.monotonic()
    RunControl().abandon(wait_seconds=30)  # the crash came before the ServerApp started
    assert time.monotonic() - t0 < 5


def test_the_guard_passes_calls_through_until_cancelled():
    control = RunControl()
    grid = cancellable(_DeadRuntimeGrid(), control)
    assert grid.push_messages(["x"]) == ["m-1"] and grid.pull_messages({"m-1"}) == []
    control.cancel.set()
    with pytest.raises(RunCancelled):
        grid.pull_messages({"m-1"})
