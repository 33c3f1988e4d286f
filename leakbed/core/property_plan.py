"""Which property examples a device trains on, and from when (seed 002 §7.2.4 and §7.2.7).

The seed's property experiments control who holds the property (only the target, §7.2.6-7.2.7)
and when it appears in the target's batches (Figure 7.5). ``data.property_plan`` describes this;
the device applies it to its private data before training, so the attack and the referee see the
federation the experiment describes. Nothing changes under the default plan.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.config import PropertyPlanConfig
from leakbed.core.data.corpus import UserData


def property_holders(plan: PropertyPlanConfig, seed: int, user_ids: list[str]) -> set[str]:
    """Named holders, or a seeded draw of round(holder_fraction·U) users (all users by default)."""
    if plan.holders:
        unknown = sorted(set(plan.holders) - set(user_ids))
        if unknown:
            raise ValueError(f"data.property_plan.holders: {unknown[:3]} are not users of the federation")
        return set(plan.holders)
    if plan.holder_fraction >= 1.0:
        return set(user_ids)
    k = max(1, round(plan.holder_fraction * len(user_ids)))
    rng = np.random.default_rng([seed, 0x9209])
    return {str(u) for u in rng.choice(sorted(user_ids), size=k, replace=False)}


def is_default(plan: PropertyPlanConfig) -> bool:
    return not plan.holders and plan.holder_fraction >= 1.0 and plan.onset_round == 0


def planned_data(plan: PropertyPlanConfig, seed: int, user_ids: list[str], user: str, data: UserData, rnd: int) -> UserData:
    """The examples this device trains on in round ``rnd``: non-holders leave out their property
    examples; with an onset round, holders train without them before it and on them only from it on."""
    if is_default(plan) or "property" not in data.attrs:
        return data
    prop = np.asarray(data.attrs["property"]).astype(bool)
    if user not in property_holders(plan, seed, user_ids):
        keep = ~prop
    elif plan.onset_round == 0:
        return data
    else:
        keep = prop if rnd >= plan.onset_round else ~prop
    return data.take(np.flatnonzero(keep))


def check_property_setup(plan: PropertyPlanConfig, seed: int, users: dict[str, UserData]) -> None:
    """A property plan the data cannot serve fails before anything starts (one-line ValueError)."""
    if not is_default(plan) and not all("property" in d.attrs for d in users.values()):
        raise ValueError(
            "data.property_plan needs a per-example 'property' attribute "
            "(synthetic data, LEAF images' bold strokes, or a table column named property)"
        )
    property_holders(plan, seed, list(users))  # named holders must be users of the federation
