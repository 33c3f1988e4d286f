"""The sets an attack's params define over its knowledge, recomputed by the referee from trusted inputs.

An open-world attack splits its known users into holdout / seen / unseen, a cross-modal attack pairs a share of them
with images, an attribute attack picks its attribute columns. Each is a pure function of the attacker's knowledge,
its own seed and its params, so the attack computes it in its sandbox and the referee recomputes the same set from
the knowledge and params trusted code filed: the sets a metric is taken over are never read from an attack's outputs
(a declared ``holdout`` list would let an attack drop the updates it ranks worst from the test set).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from leakbed.core.data.corpus import UserData

SEEN_FRACTION = 0.5  # open world: share of the non-holdout users whose prior the attacker holds
HOLDOUT_FRACTION = 1 / 3  # open world: share of users whose updates train the "unseen" class (seed 001: 1/3)
PAIRED_FRACTION = 0.5  # cross-modal: share of known users whose images the attacker also holds
MAX_VALUES = 20  # attribute inference: most distinct values of an inferred attribute


def split_users(identities: list[str], seed: int, seen_fraction: float, holdout_fraction: float) -> dict[str, list[str]]:
    """Open world (seed 001 §6.1.2): {"holdout", "seen", "unseen"}, disjoint, sorted lists covering ``identities``.
    The permutation does not depend on the seen share, so a sweep over seen shares keeps the holdout set fixed."""
    ids = sorted(identities)
    perm = np.random.default_rng([seed, 0x0BE11D]).permutation(len(ids))
    n_hold = min(len(ids) - 1, max(1, round(len(ids) * holdout_fraction)))
    rest = perm[n_hold:]
    n_seen = round(len(rest) * seen_fraction)
    return {
        "holdout": sorted(ids[k] for k in perm[:n_hold]),
        "seen": sorted(ids[k] for k in rest[:n_seen]),
        "unseen": sorted(ids[k] for k in rest[n_seen:]),
    }


def paired_users(identities: list[str], seed: int, fraction: float) -> list[str]:
    """Cross-modal matching: the seeded share of users whose images the attacker holds (at least one, not all)."""
    ids = sorted(identities)
    perm = np.random.default_rng([seed, 0xC805]).permutation(len(ids))
    n = min(len(ids) - 1, max(1, round(len(ids) * fraction)))
    return sorted(ids[k] for k in perm[:n])


def attribute_columns(prior: Mapping[str, UserData], named: list[str], max_values: int) -> list[str]:
    """Attribute inference: the named columns (each must exist for every user), else every per-user attribute:
    constant within each user and taking 2..max_values values over users."""
    common = set.intersection(*(set(d.attrs) for d in prior.values())) if prior else set()
    if named:
        missing = [c for c in named if c not in common]
        if missing:
            raise ValueError(f"attribute column {missing[0]!r} is not in every user's data; have {sorted(common)}")
        return list(named)
    out = []
    for c in sorted(common):
        cols = [d.attrs[c] for d in prior.values() if len(d)]
        per_user = all(np.all(v == v[0]) for v in cols)
        n_values = len(np.unique(np.concatenate(cols)))
        if per_user and 2 <= n_values <= max_values:
            out.append(c)
    return out
