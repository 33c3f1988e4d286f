"""What the server asks of the defenses' server halves, without importing a defense.

The product hands a run its ``ServerHalves`` (``leakbed.server_defenses``): the wrappers around the curious
tap's inner FedAvg (DP-FedAvg's noise on the aggregate), whether the aggregate must weight updates equally,
and the privacy accounting that goes into ``metrics.json``.
"""

from __future__ import annotations

from typing import Protocol

from flwr.app import Message
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp.strategy import Strategy


class ServerHalves(Protocol):
    uniform_weights: bool

    def wrap(self, strategy: Strategy, users: list[str], sampled: int, canaries: int = 0,
             noise_secret: int | None = None) -> Strategy:  # fmt: skip
        """``strategy`` inside every defense's server half, in config order; each round it averages ``sampled`` devices'
        and ``canaries`` canary replies, and draws its DP noise from ``noise_secret`` (the OS's randomness: None)."""
        ...

    def clip(self) -> float | None:
        """The L2 norm the defenses bound each update to, or None."""
        ...

    def canary(self, train: Message, reply: ClientAppCallable, rnd: int, canary: int) -> Message:
        """A privacy audit's canary reply to ``train`` after the device Mods a real adopting device's reply passes."""
        ...

    def privacy(self, users: list[str], sampled: int, releases: int, canaries: int = 0) -> list[dict]:
        """A row per defense that accounts for its privacy after ``releases`` aggregates of ``sampled`` devices' and
        ``canaries`` canary replies."""
        ...
