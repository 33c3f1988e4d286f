"""``server.startup.bounded_start``: round 1 fails within fl.startup_timeout when no device answers
(a simulation whose Ray never started), waits as Flower does once one has, and later rounds are untouched."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from leakbed.server.sampling import StartupTimeout
from leakbed.server.startup import bounded_start


class SilentGrid:
    """Accepts messages; answers the ids in ``answers`` after ``delay`` seconds, the rest never."""

    def __init__(self, answers: set[str] = frozenset(), delay: float = 0.0) -> None:
        self.answers, self.delay, self.t0, self.calls = set(answers), delay, 0.0, 0

    def push_messages(self, messages):
        self.t0 = time.monotonic()
        return list(messages)

    def pull_messages(self, ids):
        if time.monotonic() - self.t0 < self.delay:
            return []
        got = [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i)) for i in set(ids) & self.answers]
        self.answers -= {m.metadata.reply_to_message_id for m in got}
        return got

    def send_and_receive(self, messages, timeout=None):
        self.calls += 1
        return ["later round"]


def test_no_reply_fails_round_one_within_the_startup_timeout():
    grid = bounded_start(SilentGrid(), 1.0)
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout, match=r"none of the 2 devices sent in round 1 answered within fl.startup_timeout = 1 s"):
        grid.send_and_receive(["a", "b"], timeout=600)
    assert 0.9 < time.monotonic() - t0 < 5


def test_one_reply_in_time_keeps_flowers_wait_and_later_rounds_are_untouched():
    grid = bounded_start(SilentGrid({"a"}, delay=0.3), 1.0)
    t0 = time.monotonic()
    replies = grid.send_and_receive(["a", "b"], timeout=2.0)  # "b" never answers: the round timeout ends the wait
    assert [r.metadata.reply_to_message_id for r in replies] == ["a"] and 1.9 < time.monotonic() - t0 < 5
    assert grid.send_and_receive(["c"], timeout=1) == ["later round"]
