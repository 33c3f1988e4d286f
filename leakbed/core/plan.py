"""What a device is told each round: its plan, not the experiment.

The server sends every device of a run the same plan in the round's config (``PLAN_KEY``, JSON) beside
the training keys (``core.training.TrainConfig.KEYS``): how to load and split the data (so a device finds
its own user's data from its partition id), the model, the run's defenses with their parameters and
adopters, the per-sample truth it must seal, and an adversarial participant's settings. No attack, no
telemetry, no pool, no rounds. A device decodes it once per message (``client.plan``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from leakbed.core.config import (
    AdversaryConfig,
    BackgroundConfig,
    DataConfig,
    ModelConfig,
    PriorRule,
    Section,
    SplitConfig,
)

PLAN_KEY = "plan"  # a train message's config: the device's plan, JSON
TICKET_KEY = "leakbed-ticket-seed"  # a query message's config: the seed of the devices' sampling tickets


class PlannedDefense(Section):
    """One ``defenses`` entry as a device applies it: its index in the run's list (its seeds derive from it),
    its name, its validated parameters and the users who adopt it."""

    index: int = Field(..., ge=0, le=1000, description="position in the run's defenses [index]")
    name: str = Field(..., max_length=40, description="the defense [name]")
    params: dict[str, Any] = Field({}, description="its parameters, validated by the defense's own model [table]")
    adopters: list[str] = Field([], max_length=1_000_000, description="users applying it [user ids]")


class DevicePlan(Section):
    """Everything a device needs for a round of a run, and nothing else."""

    seed: int = Field(..., ge=0, le=2**31 - 1, description="the experiment seed: data, training and defense seeds [integer]")
    rule: PriorRule = Field(..., description="the prior rule the federation is split by [name]")
    data: DataConfig
    split: SplitConfig
    background: BackgroundConfig
    model: ModelConfig
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device [name]")
    defenses: list[PlannedDefense] = Field([], max_length=16, description="the run's defenses, in config order [list]")
    records: bool = Field(False, description="seal the records (and properties) the update's batches used [flag]")
    adversary: AdversaryConfig = AdversaryConfig()
    participants: int = Field(1, ge=1, le=1_000_000, description="devices sampled per round, K [count]")
    noise_secret: int | None = Field(
        None, ge=0, lt=2**128,
        description="the run's DP noise secret (the referee's, never in the config): devices draw DP noise from it; "
        "None = the OS's randomness [integer]",
    )  # fmt: skip

    def defenses_of(self, user: str) -> list[PlannedDefense]:
        """The defenses ``user`` applies, in config order."""
        return [d for d in self.defenses if user in d.adopters]
