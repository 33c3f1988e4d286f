"""Who adopts which defense: seed 001 §7 asks that users can adopt defenses selectively and to
different extents. Shared ground because devices apply it and the referee reports by it."""

from __future__ import annotations

import numpy as np

from leakbed.core.config import DefenseConfig, ExperimentConfig


def adopters(defense: DefenseConfig, index: int, user_ids: list[str], seed: int) -> set[str]:
    """Named users, or a seeded draw of round(fraction·U) users (at least one)."""
    if defense.users:
        unknown = sorted(set(defense.users) - set(user_ids))
        if unknown:
            raise ValueError(f"defenses.{index}.users: {unknown[:3]} are not users of the federation")
        return set(defense.users)
    k = max(1, round(defense.fraction * len(user_ids)))
    rng = np.random.default_rng([seed, index, 0xDEF])
    return {str(u) for u in rng.choice(sorted(user_ids), size=k, replace=False)}


def defenses_of(cfg: ExperimentConfig, user_ids: list[str], user: str) -> list[tuple[int, DefenseConfig]]:
    """The (index, defense) pairs this user applies, in config order."""
    return [(i, d) for i, d in enumerate(cfg.defenses) if user in adopters(d, i, user_ids, cfg.seed)]


def defending_users(cfg: ExperimentConfig, user_ids: list[str]) -> set[str]:
    """Users that apply at least one defense."""
    out: set[str] = set()
    for i, d in enumerate(cfg.defenses):
        out |= adopters(d, i, user_ids, cfg.seed)
    return out
