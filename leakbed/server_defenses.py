"""The server halves of a run's defenses, handed to the server (which never imports a defense).

A defense with a server half (DP-FedAvg's noise on the aggregate) wraps the curious tap's inner FedAvg
(``Defense.wrap_strategy``), may ask for equal weights (``uniform_weights``: its noise's sensitivity assumes
them), and reports its privacy accounting for ``metrics.json`` (``Defense.privacy``). A privacy audit's canary
reply passes every defense's own device Mod (``Defense.mod``), as an adopting device's reply does.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp.strategy import Strategy

from leakbed.core.adoption import adopters
from leakbed.core.config import ExperimentConfig
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.defenses.contract import DeviceContext, ServerContext
from leakbed.defenses.registry import defense, params_of


def _bind(mod: Mod, call_next: ClientAppCallable) -> ClientAppCallable:
    return lambda msg, ctx: mod(msg, ctx, call_next)


@dataclass
class CanaryContext(DeviceContext):
    """A canary client's device context: the run's plan and round, no user of the federation (``user`` names the
    canary, so seeds drawn per device differ per canary)."""

    canary: int = 0

    @property
    def user(self) -> str:
        return f"canary-{self.canary}"


class ServerDefenses:
    """``server.experiment.ServerHalves`` for one run's defenses (in config order)."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self._cfg = cfg
        self.uniform_weights = any(defense(d.name).uniform_weights for d in cfg.defenses)

    def _context(self, users: list[str], sampled: int, canaries: int = 0, noise_secret: int | None = None) -> ServerContext:
        cfg = self._cfg
        return ServerContext(users, sampled, cfg.fl.rounds, cfg.seed, canaries=canaries, noise_secret=noise_secret)

    def wrap(self, strategy: Strategy, users: list[str], sampled: int, canaries: int = 0,
             noise_secret: int | None = None) -> Strategy:  # fmt: skip
        ctx = self._context(users, sampled, canaries, noise_secret)
        for entry in self._cfg.defenses:
            strategy = defense(entry.name).wrap_strategy(strategy, params_of(entry), ctx)
        return strategy

    def clip(self) -> float | None:
        """The smallest L2 norm a defense bounds each update to, or None."""
        norms = [n for e in self._cfg.defenses if (n := defense(e.name).clip(params_of(e))) is not None]
        return min(norms) if norms else None

    def canary(self, train: Message, reply: ClientAppCallable, rnd: int, canary: int) -> Message:
        """A canary client's reply to ``train``: ``reply`` (its update) inside every defense's device Mod, built from
        the plan ``train`` carries as a device builds it, in the order a device stacks them (a canary adopts every
        defense)."""
        plan = DevicePlan.model_validate_json(str(train.content.config_records["config"][PLAN_KEY]))
        chain, context = reply, Context(0, 0, {}, RecordDict(), {})
        for entry in sorted(plan.defenses, key=lambda e: (defense(e.name).mod_stage, e.index)):
            d = defense(entry.name)
            mod = d.mod(CanaryContext(plan, -1, rnd, entry.index, canary=canary), d.params.model_construct(**entry.params))
            if mod is not None:
                chain = _bind(mod, chain)
        return chain(train, context)

    def privacy(self, users: list[str], sampled: int, releases: int, canaries: int = 0) -> list[dict]:
        """A row per defense that accounts for its privacy (ε, δ...), its name first."""
        ctx, rows = self._context(users, sampled, canaries), []
        for i, entry in enumerate(self._cfg.defenses):
            n = len(adopters(entry, i, users, self._cfg.seed))
            row = defense(entry.name).privacy(params_of(entry), ctx, n, releases)
            if row is not None:
                rows.append({"defense": entry.name, **row})
        return rows
