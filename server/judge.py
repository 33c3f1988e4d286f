"""What the server asks of the referee, without holding the truth itself.

The server runs the protocol and the attack pool; scoring joins predictions with the sealed truth,
which only the referee reads. The product hands a run a ``Judge`` (``referee.judge.RunJudge``), so
the server needs nothing of the referee beyond sealing.
"""

from __future__ import annotations

from typing import Protocol


class Judge(Protocol):
    def interim(self, name: str) -> dict:
        """One attack's score on what has arrived so far (Prometheus gauges over rounds)."""
        ...

    def attackers(self, names: list[str], groups: dict[str, set[str]] | None) -> dict[str, dict]:
        """Closed-world re-identification metrics of each attacker, overall, per round and per group."""
        ...

    def suite(self, names: list[str]) -> dict[str, dict]:
        """Each further suite attack's metrics, tables and figures."""
        ...

    def participants(self) -> dict:
        """Attacks by adversarial devices, scored apart from the server's."""
        ...
