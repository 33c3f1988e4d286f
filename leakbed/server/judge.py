"""What the server asks of the referee, without holding the truth itself.

The server runs the protocol and the attack pool; scoring joins the attacks' outputs with the sealed
truth, which only the referee reads. The product hands a run a ``Judge`` (``referee.judge.RunJudge``),
so the server needs nothing of the referee beyond sealing.
"""

from __future__ import annotations

from typing import Protocol

from leakbed.server.canaries import Auditor


class Judge(Protocol):
    def interim(self, name: str) -> dict:
        """One attack's score on what has arrived so far (Prometheus gauges over rounds)."""
        ...

    def score(self, names: list[str], groups: dict[str, set[str]] | None) -> dict[str, dict]:
        """Each attack's metrics by its plugin's scorer (re-identification also per round and per group of users)."""
        ...

    def participants(self) -> dict:
        """Attacks by adversarial devices, scored apart from the server's."""
        ...

    def canaries(self, keys: list[str], shapes: dict[str, tuple], norm: float) -> Auditor:
        """The privacy audit's canaries over the model entries ``keys`` at L2 norm ``norm``; their secret (directions,
        who is inserted) stays with the referee."""
        ...

    def noise_secret(self) -> int:
        """The run's DP noise secret, kept with the truth (drawn from the OS at a run's start, or the one kept for a
        run reproduced on request): the DP noise is drawn from it, never from the config."""
        ...

    def users_sealed(self) -> int:
        """How many distinct users the sealed updates came from (what the attacks' numbers rest on)."""
        ...
