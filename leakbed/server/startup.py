"""A bounded start: round 1 fails with ``StartupTimeout`` when no device answers in time.

In simulation every virtual SuperNode is registered before its runtime starts, so waiting for the
devices to connect (``server.sampling.TicketSampler``) passes even when Ray never brings its raylet up;
Flower's ``send_and_receive`` would then wait the whole round timeout for replies that never come,
and under ``flwr run`` the simulation process outlived the SuperLink. Bounding the first round's
first reply by ``fl.startup_timeout`` makes that one clear error in every mode (``leakbed run``,
``flwr run`` in simulation, a deployment) and under SecAgg+ too: the
ServerApp's main raises, so its process ends. Later rounds keep Flower's own timeout semantics.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

from leakbed.server.sampling import StartupTimeout

PULL_INTERVAL = 0.5  # seconds between pulls while waiting for round 1's replies


def bounded_start(grid: Grid, startup_timeout: float) -> Grid:
    """Make ``grid``'s first ``send_and_receive`` raise ``StartupTimeout`` if none of its messages
    is answered within ``startup_timeout`` seconds; once one is, it waits as Flower's does."""
    original = grid.send_and_receive
    first = [True]

    def send_and_receive(messages: Iterable[Message], timeout: float | None = None) -> Iterable[Message]:
        if not first[0]:
            return original(messages, timeout=timeout)
        first[0] = False
        pending = set(grid.push_messages(messages))
        sent, t0 = len(pending), time.monotonic()
        replies: list[Message] = []
        while pending and (timeout is None or time.monotonic() - t0 < timeout):
            got = list(grid.pull_messages(pending))
            replies += got
            pending -= {m.metadata.reply_to_message_id for m in got}
            if not replies and time.monotonic() - t0 > startup_timeout:
                raise StartupTimeout(
                    f"none of the {sent} devices sent in round 1 answered within fl.startup_timeout = "
                    f"{startup_timeout:g} s (their runtime never started: Ray, SuperNodes or ClientApps)"
                )
            if pending:
                time.sleep(PULL_INTERVAL)
        return replies

    grid.send_and_receive = send_and_receive  # type: ignore[method-assign]
    return grid
