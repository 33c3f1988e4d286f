"""The registry of the attack suite beyond closed-world re-identification.

Each attack module registers an ``AttackSpec``; the worker dispatches round and fit tasks to it, so
several attacks run side by side in the pool. A spec's ``on_round`` runs once per round on that
round's snapshot (e.g. auxiliary gradients on the round's global model); its ``fit`` runs after
the stream is drained, reads the update store and writes its outputs back to the store for the
referee to score. Attacks see only what ``attacks.records`` and the store carry. A spec's ``needs``
declares what the attack requires of the data and the model; ``unmet`` checks it, and the product
refuses a config that cannot meet it before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from core.store import UpdateStore

if TYPE_CHECKING:
    from core.config import ExperimentConfig
    from core.data import Federation

RoundHook = Callable[[UpdateStore, AttackerKnowledge, RoundSnapshot], None]
FitHook = Callable[[UpdateStore, AttackerKnowledge], None]


@dataclass(frozen=True)
class Needs:
    """What an attack requires of the data and the model, declared beside it so that ``unmet`` can
    refuse a config before Ray or any process starts, instead of the attack failing in its fit after
    every FL round has run."""

    modality: Literal["image", "text"] | None = None  # image (C, H, W) or token examples; None = either
    tasks: frozenset[str] | None = None  # corpus tasks it works on; None = any
    attribute_columns: bool = False  # per-user attribute columns (constant within each user), or the named ones
    property_column: bool = False  # a per-example 'property' attribute, with and without it in the prior
    profile_class: bool = False  # attack.profile.target_class is a class with examples in the prior
    full_updates: bool = False  # the attack reads every parameter's Δw, not only the attack layers
    participation: bool = False  # each round's sampled nodes, as per-run keyed pseudonyms (attacks.linkage)
    models: frozenset[str] | None = None  # model.name values (auto resolved) it is written for; None = any
    plain_sgd: bool = False  # Δw = η·Σ gradients: fl.optimizer 'sgd' without momentum (the gradient-inversion attacks)


@dataclass(frozen=True)
class AttackSpec:
    name: str
    fit: FitHook
    on_round: RoundHook | None = None
    needs: Needs = field(default_factory=Needs)


REGISTRY: dict[str, AttackSpec] = {}


def register(spec: AttackSpec) -> AttackSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"attack {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    """Import the attack modules so that they register themselves."""
    import attacks.catalog  # noqa: F401


def known_attacks() -> list[str]:
    """Every registered suite attack's name."""
    _load()
    return sorted(REGISTRY)


def spec(name: str) -> AttackSpec:
    _load()
    if name not in REGISTRY:
        raise KeyError(f"unknown attack {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]


def needs_full_updates(names: list[str] | tuple[str, ...]) -> bool:
    """Whether the shuffler must pass full Δw arrays on to the pool for these attacks."""
    return any(spec(n).needs.full_updates for n in names)


def needs_participation(names: list[str] | tuple[str, ...]) -> bool:
    """Whether the server must tell the pool each round's sampled nodes (as keyed pseudonyms) for these attacks."""
    return any(spec(n).needs.participation for n in names)


def unmet(name: str, fed: Federation, cfg: ExperimentConfig) -> str | None:
    """The one-line reason why attack ``name`` cannot run on this federation and config, or None."""
    needs, corpus = spec(name).needs, fed.corpus
    source = f"data.source {cfg.data.source!r} ({corpus.name})"
    modality = "image" if len(corpus.input_shape) == 3 else "text"
    if needs.modality and needs.modality != modality:
        return f"attack.suite: {name!r} needs {needs.modality} data; {source} is {modality}"
    if needs.tasks is not None and corpus.task not in needs.tasks:
        return f"attack.suite: {name!r} needs a {' or '.join(sorted(needs.tasks))} task; {source} is {corpus.task}"
    if needs.models is not None:
        from core.models import resolve_name

        model = resolve_name(cfg.model, corpus)
        if model not in needs.models:
            return f"attack.suite: {name!r} needs model.name {' or '.join(sorted(needs.models))}; {source} trains {model!r}"
    if needs.plain_sgd and (cfg.fl.optimizer != "sgd" or cfg.fl.momentum):
        return (
            f"attack.suite: {name!r} inverts Δw = η·Σ gradients, so it needs fl.optimizer = 'sgd' with fl.momentum = 0 "
            f"(got {cfg.fl.optimizer!r}, momentum {cfg.fl.momentum:g})"
        )
    prior = fed.prior()
    if needs.attribute_columns:
        why = _attributes_unmet(name, prior, cfg, source)
        if why:
            return why
    if needs.property_column:
        if not all("property" in d.attrs for d in prior.values()):
            return f"attack.suite: {name!r} needs a per-example 'property' column; {source} has none"
        values = np.concatenate([np.asarray(d.attrs["property"]).astype(bool) for d in prior.values()])
        if values.all() or not values.any():
            only = "with" if values.any() else "without"
            return f"attack.suite: {name!r} needs prior examples with and without the property; {source} has only {only}"
    if needs.profile_class:
        k = cfg.attack.profile.target_class
        if k >= corpus.num_classes:
            return f"attack.profile.target_class = {k}: {source} has classes 0..{corpus.num_classes - 1}"
        if not any(np.any(d.y == k) for d in prior.values()):
            return f"attack.profile.target_class = {k}: no user's prior holds an example of class {k} in {source}"
    return None


def _attributes_unmet(name: str, prior: dict, cfg: ExperimentConfig, source: str) -> str | None:
    from attacks.attributes import attribute_columns

    a = cfg.attack.attributes
    try:
        columns = attribute_columns(prior, a.columns, a.max_values)
    except ValueError as err:
        return f"attack.attributes.columns: {err}"
    if not columns:
        return (
            f"attack.suite: {name!r} needs per-user attribute columns (constant within each user, 2 to "
            f"{a.max_values} values; or name them in attack.attributes.columns); {source} has none"
        )
    return None


def run_round(store: UpdateStore, knowledge: AttackerKnowledge, snapshot: RoundSnapshot) -> None:
    for name in knowledge.attack.suite:
        hook = spec(name).on_round
        if hook is not None:
            hook(store, knowledge, snapshot)


def run_fit(store: UpdateStore, knowledge: AttackerKnowledge, name: str) -> None:
    spec(name).fit(store, knowledge)
