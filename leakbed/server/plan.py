"""The device plan of a run (``core.plan``): what the server tells every device, built once per run."""

from __future__ import annotations

from leakbed.core.adoption import adopters
from leakbed.core.config import ExperimentConfig
from leakbed.core.plan import DevicePlan, PlannedDefense


def sampled_per_round(cfg: ExperimentConfig, users: int) -> int:
    """K: the devices sampled each round (``server.sampling.TicketSampler``'s rule)."""
    return min(users, max(int(users * cfg.fl.fraction_train), 1))


def device_plan(cfg: ExperimentConfig, rule: str, user_ids: list[str], records: bool = False) -> DevicePlan:
    """The run's plan: its data recipe, model, defenses with their (validated) parameters and adopters, and
    whether devices must seal the records their batches used (``records``: an attack of the suite scores per sample,
    as its declaration says)."""
    return DevicePlan(
        seed=cfg.seed,
        rule=rule,  # type: ignore[arg-type]
        data=cfg.data,
        split=cfg.split,
        background=cfg.background,
        model=cfg.model,
        device=cfg.device,
        defenses=[
            PlannedDefense(index=i, name=d.name, params=d.params, adopters=sorted(adopters(d, i, user_ids, cfg.seed)))
            for i, d in enumerate(cfg.defenses)
        ],
        records=records,
        adversary=cfg.adversary,
        participants=sampled_per_round(cfg, len(user_ids)),
    )
