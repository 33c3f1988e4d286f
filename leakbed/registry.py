"""One name per attack, resolved on both sides: the attack module (``attacks.catalog``) and the
referee's scorer (``referee.scorers``). Adding an attack touches its module, its scorer and one
registry line on each side; the config names it, and this check runs before anything starts."""

from __future__ import annotations

from attacks.suite import known_attacks, unmet
from core.config import ConfigError, ExperimentConfig
from core.data import Federation
from referee.scorers import SCORERS


def suite_attacks() -> list[str]:
    """Attacks both sides know (a test asserts that the two sides agree)."""
    return sorted(set(known_attacks()) & set(SCORERS))


def check_suite(cfg: ExperimentConfig) -> None:
    known = suite_attacks()
    for name in cfg.attack.suite:
        if name not in known:
            raise ConfigError(f"attack.suite: unknown attack {name!r}; known: {', '.join(known)}")


def check_needs(cfg: ExperimentConfig, fed: Federation) -> None:
    """Every suite attack's declared needs (``attacks.suite.Needs``) against one prior's federation:
    a run that cannot score an attack is refused before it starts, not after its FL rounds."""
    for name in cfg.attack.suite:
        why = unmet(name, fed, cfg)
        if why:
            raise ConfigError(why)
