"""The registry of the attack suite beyond closed-world re-identification.

Each attack module registers an ``AttackSpec``; the worker dispatches round and fit tasks to it, so
several attacks run side by side in the pool. A spec's ``on_round`` runs once per round on that
round's snapshot (e.g. auxiliary gradients on the round's global model); its ``fit`` runs after
the stream is drained, reads the update store and writes its outputs back to the store for the
referee to score. Attacks see only what ``attacks.records`` and the store carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from leakbed.store import UpdateStore

RoundHook = Callable[[UpdateStore, AttackerKnowledge, RoundSnapshot], None]
FitHook = Callable[[UpdateStore, AttackerKnowledge], None]


@dataclass(frozen=True)
class AttackSpec:
    name: str
    fit: FitHook
    on_round: RoundHook | None = None
    needs_full_updates: bool = False  # the attack reads every parameter's Δw, not only the attack layers


REGISTRY: dict[str, AttackSpec] = {}


def register(spec: AttackSpec) -> AttackSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"attack {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    """Import the attack modules so that they register themselves."""
    import attacks.catalog  # noqa: F401


def spec(name: str) -> AttackSpec:
    _load()
    if name not in REGISTRY:
        raise KeyError(f"unknown attack {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]


def needs_full_updates(names: list[str] | tuple[str, ...]) -> bool:
    """Whether the shuffler must pass full Δw arrays on to the pool for these attacks."""
    return any(spec(n).needs_full_updates for n in names)


def run_round(store: UpdateStore, knowledge: AttackerKnowledge, snapshot: RoundSnapshot) -> None:
    for name in knowledge.attack.suite:
        hook = spec(name).on_round
        if hook is not None:
            hook(store, knowledge, snapshot)


def run_fit(store: UpdateStore, knowledge: AttackerKnowledge, name: str) -> None:
    spec(name).fit(store, knowledge)
