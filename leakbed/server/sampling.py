"""Which devices train in a round: C·K of them, drawn by a per-round seeded generator over the devices'
sampling tickets (``core.derive.node_ticket``), not over node ids.

A SuperLink hands out node ids at random, so a sampler over node ids draws other users under the same
seed from one run to the next. Each device instead reports a ticket, a function of the run's ticket
seed and its partition alone, answering a query message the first time the sampler meets it; the
cohort is drawn over sorted tickets. The tickets reproduce the node ids the seeded in-process
simulation of earlier versions gave, so the same seed samples the same users as it did then, in
simulation and in a deployment alike. Only the sampler holds the tickets; the attack side never sees
them, nor node ids.
"""

from __future__ import annotations

import random
import time

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from leakbed.core.plan import TICKET_KEY


class StartupTimeout(RuntimeError):
    """The devices of a run did not all connect in time."""


class TicketSampler:
    def __init__(self, seed: int, ticket_seed: int, fraction: float, users: int, startup_timeout: float) -> None:
        self._seed = seed
        self._ticket_seed = ticket_seed
        self._fraction = fraction
        self._users = users
        self._startup_timeout = startup_timeout
        self._tickets: dict[int, int] = {}  # node id -> ticket

    def sample(self, grid: Grid, server_round: int, timeout: float) -> list[int]:
        """The round's cohort (node ids). Only the first round waits for the whole federation, and at most
        ``startup_timeout``: a run whose devices never appear fails with a clear error instead of waiting
        for ever; a device lost later (crashed, disconnected) must not stall the run."""
        deadline = time.monotonic() + self._startup_timeout
        while len(nodes := sorted(grid.get_node_ids())) < self._users and server_round == 1:
            if time.monotonic() > deadline:
                within = f"fl.startup_timeout = {self._startup_timeout:g} s"
                raise StartupTimeout(f"only {len(nodes)} of {self._users} devices connected within {within}")
            time.sleep(1)
        self._ask(grid, [n for n in nodes if n not in self._tickets], timeout)
        by_ticket = {self._tickets[n]: n for n in nodes if n in self._tickets}
        k = max(int(len(nodes) * self._fraction), 1)
        chosen = random.Random(f"{self._seed}/{server_round}").sample(sorted(by_ticket), min(k, len(by_ticket)))
        return [by_ticket[t] for t in chosen]

    def _ask(self, grid: Grid, nodes: list[int], timeout: float) -> None:
        """Each new device's ticket (a device that does not answer stays unsampled until it does)."""
        if not nodes:
            return
        ask = RecordDict({"config": ConfigRecord({TICKET_KEY: self._ticket_seed})})
        messages = [Message(ask, dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if not reply.has_error():
                self._tickets[reply.metadata.src_node_id] = int(reply.content.config_records["config"]["ticket"])
