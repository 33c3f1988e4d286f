"""The attack's parameters: its budget (which updates, how many optimisation steps) and the paper's knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from leakbed.plugin import Params


class FedAvgInversionParams(Params):
    """Defaults follow Dimitrov et al. 2022's FEMNIST runs where they carry over (layer-weighted L2, the ``l2_mean``
    epoch prior, a step decayed ×0.995 every 10 iterations). The prior's weight differs from their 1000 because the
    matching loss here is divided by the tapped update's norm; 10 was chosen on FEMNIST writers' updates of 5 and
    10 epochs (0 and 1000 recovered fewer images), the start at the prior's mean image likewise (U[0, 1] fewer)."""

    updates_per_round: int = Field(
        4, ge=1, le=10_000, description="budget: tapped updates attacked in each attacked round (a seeded pick) [updates]"
    )
    rounds: int = Field(1, ge=1, le=10_000, description="budget: how many of the latest rounds are attacked [rounds]")
    budget_seconds: float = Field(
        3600.0, gt=0.0, le=604_800.0, description="budget: its fit is ended, and reported failed, past this [s]"
    )
    iterations: int = Field(400, ge=1, le=100_000, description="budget: optimisation steps per attacked update [count]")
    max_samples: int = Field(
        256, ge=1, le=65_536, description="skip (and count) an update whose training used more distinct examples [examples]"
    )
    max_local_steps: int = Field(
        500, ge=1, le=100_000, description="skip (and count) an update of more local steps (cost grows with them) [steps]"
    )
    step_size: float = Field(0.05, gt=0.0, le=10.0, description="Adam step on the inputs (pixels in [0, 1]) [1]")
    decay: float = Field(0.995, gt=0.0, le=1.0, description="step multiplied by this every 10 iterations (paper: 0.995) [1]")
    distance: Literal["l2", "cosine"] = Field(
        "l2", description="update distance: layer-weighted L2 over the tapped update's norm (paper, FEMNIST) or cosine [name]"
    )
    tv_weight: float = Field(0.01, ge=0.0, le=100.0, description="weight of the total-variation image prior [1]")
    epoch_prior_weight: float = Field(
        10.0, ge=0.0, le=1e6, description="weight of the permutation-invariant epoch prior; 0 = epochs untied [1]"
    )
    init: Literal["prior-mean", "uniform"] = Field(
        "prior-mean",
        description="start of the inputs: the attacker's prior mean image plus uniform noise of 0.1, or U[0, 1] [name]",
    )
    restarts: int = Field(1, ge=1, le=100, description="random restarts per update; the lowest matching loss is kept [count]")
    classifier_epochs: int = Field(50, ge=1, le=10_000, description="epochs of seed 004's property classifier f_p [count]")
    classifier_lr: float = Field(1e-4, gt=0.0, le=1.0, description="Adam learning rate of f_p (seed 004: 1e-4) [1]")
    aux_examples: int = Field(1000, ge=16, le=1_000_000, description="most prior examples f_p and the label step use [count]")
