"""The server halves of a run's defenses, handed to the server (which never imports a defense).

A defense with a server half (DP-FedAvg's noise on the aggregate) wraps the curious tap's inner FedAvg
(``Defense.wrap_strategy``), may ask for equal weights (``uniform_weights``: its noise's sensitivity assumes
them), and reports its privacy accounting for ``metrics.json`` (``Defense.privacy``).
"""

from __future__ import annotations

import zlib

from flwr.app import Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp.strategy import Strategy

from leakbed.core.adoption import adopters
from leakbed.core.config import ExperimentConfig
from leakbed.defenses.contract import ServerContext
from leakbed.defenses.registry import defense, params_of


def _bind(mod: Mod, call_next: ClientAppCallable) -> ClientAppCallable:
    return lambda msg, ctx: mod(msg, ctx, call_next)


class ServerDefenses:
    """``server.experiment.ServerHalves`` for one run's defenses (in config order)."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self._cfg = cfg
        self.uniform_weights = any(defense(d.name).uniform_weights for d in cfg.defenses)

    def _context(self, users: list[str], sampled: int) -> ServerContext:
        return ServerContext(users=users, sampled=sampled, rounds=self._cfg.fl.rounds, seed=self._cfg.seed)

    def wrap(self, strategy: Strategy, users: list[str], sampled: int) -> Strategy:
        ctx = self._context(users, sampled)
        for entry in self._cfg.defenses:
            strategy = defense(entry.name).wrap_strategy(strategy, params_of(entry), ctx)
        return strategy

    def clip(self) -> float | None:
        """The smallest L2 norm a defense bounds each update to, or None."""
        norms = [n for e in self._cfg.defenses if (n := defense(e.name).clip(params_of(e))) is not None]
        return min(norms) if norms else None

    def canary(self, train: Message, reply: ClientAppCallable, rnd: int, canary: int) -> Message:
        """A canary client's reply to ``train``: ``reply`` (its update) inside every defense's canary Mod, in the order
        a device stacks them (a canary adopts every defense)."""
        chain, context = reply, Context(0, 0, {}, RecordDict(), {})
        entries = sorted(enumerate(self._cfg.defenses), key=lambda ie: (defense(ie[1].name).mod_stage, ie[0]))
        for i, entry in entries:
            seed = zlib.crc32(f"{self._cfg.seed}/{rnd}/canary-{canary}/{i}".encode())
            mod = defense(entry.name).canary_mod(params_of(entry), seed)
            if mod is not None:
                chain = _bind(mod, chain)
        return chain(train, context)

    def privacy(self, users: list[str], sampled: int, releases: int) -> list[dict]:
        """A row per defense that accounts for its privacy (ε, δ...), its name first."""
        ctx, rows = self._context(users, sampled), []
        for i, entry in enumerate(self._cfg.defenses):
            n = len(adopters(entry, i, users, self._cfg.seed))
            row = defense(entry.name).privacy(params_of(entry), ctx, n, releases)
            if row is not None:
                rows.append({"defense": entry.name, **row})
        return rows
