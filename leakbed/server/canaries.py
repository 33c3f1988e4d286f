"""The privacy audit's canary clients in the federation (Andrew et al., ICLR 2024 §3; the secret: ``referee.canaries``).

``CanaryStrategy`` sits between the curious tap and the defenses' server halves: each round it adds the inserted
canaries' replies to the real ones, after each passed the device path an adopting device's reply passes (every
update-level defense's own Mod: clipping, local noise; ``ServerHalves.canary``), and before the server-side mechanisms
(DP-FedAvg's noise on the aggregate), then shows the referee's audit the released delta. A canary's update is far
above the clipping norm, so a clipper that is missing or loose shows. The tap never sees a canary, so no attack is
fitted or scored on one; the utility is measured on the model they went into.

``audit_summary`` holds the estimates against the DP defense's claim: a run whose ε_emp interval lies wholly above the
accountant's ε is flagged (it leaks more than its DP claims).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from leakbed.core.audit import VIEWS
from leakbed.core.config import ExperimentConfig
from leakbed.core.privacy import poisson_epsilon
from leakbed.server.halves import ServerHalves
from leakbed.server.plan import sampled_per_round


@contextlib.contextmanager
def _quiet_flower() -> Iterator[None]:
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def float_keys(arrays: dict[str, np.ndarray]) -> list[str]:
    """The model entries an update moves (integer buffers are not trained)."""
    return [k for k, v in arrays.items() if np.issubdtype(v.dtype, np.floating)]


class Auditor(Protocol):
    """What the server asks of the referee's audit (``referee.canaries.CanaryAudit``): never the secret itself."""

    keys: list[str]
    per_round: int

    def joining(self, rnd: int) -> np.ndarray:
        """The inserted canaries replying in round ``rnd``."""
        ...

    def update(self, canary: int) -> dict[str, np.ndarray]:
        """Canary ``canary``'s update, shaped as the model's entries ``keys``."""
        ...

    def observe(self, rnd: int, delta: np.ndarray) -> None:
        """A released round's delta (new global model - old, flat over ``keys``)."""
        ...

    def result(self, delta: float, confidence: float) -> dict:
        """The estimates: numbers only."""
        ...


def canary_norm(cfg: ExperimentConfig, clip: float | None) -> float:
    """A canary update's L2 norm: ``audit.norm``, or ``audit.scale`` times the clipping norm the defenses state (so the
    device's clipper must act on every canary), or 1.0 without a clipping defense."""
    if cfg.audit.norm:
        return cfg.audit.norm
    return cfg.audit.scale * clip if clip else 1.0


def canary_audit(
    cfg: ExperimentConfig,
    model: torch.nn.Module,
    halves: ServerHalves,
    make: Callable[[list[str], dict[str, tuple], float], Auditor],
) -> Auditor:
    """The run's canaries over the model's float entries at ``canary_norm``, made by the referee (``make``:
    ``Judge.canaries``)."""
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    keys = float_keys(state)
    return make(keys, {k: state[k].shape for k in keys}, canary_norm(cfg, halves.clip()))


def audit_summary(audit: Auditor, privacy: list[dict], cfg: ExperimentConfig, users: int) -> dict:
    """The audit's estimates beside the accountant's ε of the same run (the DP defense's row, at its δ) and its exact
    ε; where devices are sampled, the Poisson-sampling approximation; the flag: a view whose ε_emp interval lies
    wholly above the accountant's ε."""
    row = next((r for r in privacy if "epsilon" in r), None)
    delta = float(row["delta"]) if row else cfg.audit.delta
    out = audit.result(delta, cfg.audit.confidence)
    eps = row.get("epsilon") if row else None
    out["epsilon_accountant"] = eps
    out["epsilon_exact"] = row.get("epsilon_exact") if row else None
    out["accountant"] = row.get("accountant") if row else "no DP defense: no finite guarantee"
    out["defense"] = row["defense"] if row else None
    sampled = sampled_per_round(cfg, users)
    if row and eps is not None and sampled < users:  # central noise over a sampled cohort
        q = sampled / users
        out["epsilon_poisson_approximation"] = poisson_epsilon(float(row["noise_multiplier"]), q, int(row["releases"]), delta)
        out["amplification"] = (f"Poisson sampling at q = {q:.3g}: an approximation, not a bound (Flower samples a fixed "
                                f"count of {sampled} of {users} devices)")  # fmt: skip
    flagged = []
    for view in VIEWS:
        if view in out:
            est = out[view]
            est["above_accountant"] = eps is not None and est["interval"][0] > eps
            if est["above_accountant"]:
                flagged.append(view)
    out["flagged"] = bool(flagged)
    if flagged:
        out["flag"] = (f"leaks more than its DP claims: the {100 * out['level']:.0f}% interval of ε_emp lies wholly "
                       f"above the accountant's ε = {eps:.3g} ({', '.join(flagged)})")  # fmt: skip
    return out


def _typical_metrics(records: list[MetricRecord]) -> MetricRecord:
    """A canary's metrics: the real replies' keys (FedAvg aggregates only replies that agree on them), each the mean
    of the real values, and a typical device's weight (1 under equal weights)."""
    out: dict = {}
    for key, first in records[0].items():
        if isinstance(first, int | float):
            mean = sum(float(r[key]) for r in records) / len(records)
            out[key] = type(first)(round(mean) if isinstance(first, int) else mean)
        else:
            out[key] = first
    out["num-examples"] = max(1, round(sum(float(r["num-examples"]) for r in records) / len(records)))
    return MetricRecord(out)


class CanaryStrategy(Strategy):
    """``strategy`` with the audit's canaries replying beside the real devices."""

    def __init__(self, strategy: Strategy, audit: Auditor, halves: ServerHalves) -> None:
        super().__init__()
        self.strategy = strategy
        self.audit = audit
        self._halves = halves
        self._global: dict[str, np.ndarray] = {}
        self._train: Message | None = None

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's messages; one of them is what a canary device receives (the same model and config)."""
        self._global = {k: v.numpy() for k, v in arrays.items()}
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._train = messages[0] if messages else None
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The real replies and the round's canaries, aggregated by the wrapped strategy; the delta goes to the audit."""
        real = list(replies)
        if self._train is None or not any(not m.has_error() for m in real):
            return self.strategy.aggregate_train(server_round, real)
        typical = _typical_metrics([m.content.metric_records["metrics"] for m in real if not m.has_error()])
        with _quiet_flower():  # Flower's Mods log a line per reply: not one per canary into the ServerApp's log
            canaries = [self._reply(server_round, int(j), typical) for j in self.audit.joining(server_round)]
        arrays, metrics = self.strategy.aggregate_train(server_round, [*real, *canaries])
        if arrays is not None:
            new = arrays.to_numpy_ndarrays()
            by_key = dict(zip(arrays.keys(), new, strict=True))
            moved = [(by_key[k] - self._global[k]).ravel().astype(np.float64) for k in self.audit.keys]
            self.audit.observe(server_round, np.concatenate(moved) if moved else np.zeros(0))
        return arrays, metrics

    def _reply(self, rnd: int, canary: int, metrics: MetricRecord) -> Message:
        train = self._train
        assert train is not None
        update = self.audit.update(canary)

        def device(msg: Message, _context: Context) -> Message:
            sent = msg.content.array_records["arrays"]
            arrays = ArrayRecord({k: Array(v.numpy() + update[k] if k in update else v.numpy()) for k, v in sent.items()})
            return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(dict(metrics))}), reply_to=msg)

        return self._halves.canary(train, device, rnd, canary)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)
