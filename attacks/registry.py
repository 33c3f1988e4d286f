"""The attacks a run can use: every ``Attack`` published under the entry-point group ``leakbed.attacks``.

Built-in attacks are published by leakbed's own ``pyproject.toml``, third-party ones by theirs; both are
found the same way, by name, and an attack is imported only when a run names it (a broken plugin
affects only the runs that use it). ``unmet`` checks a run against an attack's declared needs before
anything starts.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from attacks.contract import Attack, Params, ReidAttack, Setting
from core.entry_points import PluginError, load_declared, published

GROUP = "leakbed.attacks"


def names() -> list[str]:
    """Every published attack's name (nothing is imported)."""
    return published(GROUP)


@functools.cache
def attack(name: str) -> type[Attack]:
    """The attack published as ``name``; PluginError when none is, or it is not a well-formed ``Attack``."""
    cls = load_declared(GROUP, name, "attack", Attack)
    if ":" not in cls.scorer:
        raise PluginError(f"attack {name!r}: scorer must name its scoring function as 'module:function'")
    return cls  # type: ignore[return-value]


def params_of(name: str, table: dict[str, Any] | None) -> Params:
    """Attack ``name``'s parameters from its table (defaults for what is left out); pydantic's error on bad ones."""
    return attack(name).params.model_validate(table or {})


def reid_attack(name: str) -> ReidAttack:
    """An instance of a closed-world re-identification attack (the family other attacks fuse with)."""
    cls = attack(name)
    if not issubclass(cls, ReidAttack):
        raise PluginError(f"attack {name!r} is not a closed-world re-identification attack")
    return cls()


def reid_names(suite: list[str]) -> list[str]:
    """The suite's closed-world re-identification attacks, in suite order."""
    return [n for n in suite if attack(n).family == "reid"]


def needs_of(suite: list[str], flag: str) -> bool:
    """Whether any attack of ``suite`` declares the boolean need ``flag`` (full_updates, records, participation)."""
    return any(getattr(attack(n).needs, flag) for n in suite)


def unmet(name: str, params: Params, setting: Setting) -> str | None:
    """The one-line reason why attack ``name`` cannot run in ``setting``, or None."""
    cls = attack(name)
    needs, corpus, source = cls.needs, setting.corpus, setting.source
    modality = "image" if len(corpus.input_shape) == 3 else "text"
    if needs.modality and needs.modality != modality:
        return f"attack.suite: {name!r} needs {needs.modality} data; {source} is {modality}"
    if needs.tasks is not None and corpus.task not in needs.tasks:
        return f"attack.suite: {name!r} needs a {' or '.join(sorted(needs.tasks))} task; {source} is {corpus.task}"
    if needs.models is not None and setting.model not in needs.models:
        return f"attack.suite: {name!r} needs model.name {' or '.join(sorted(needs.models))}; {source} trains {setting.model!r}"
    if needs.plain_sgd and (setting.optimizer != "sgd" or setting.momentum):
        return (
            f"attack.suite: {name!r} inverts Δw = η·Σ gradients, so it needs fl.optimizer = 'sgd' with fl.momentum = 0 "
            f"(got {setting.optimizer!r}, momentum {setting.momentum:g})"
        )
    if needs.property_column:
        if not all("property" in d.attrs for d in setting.prior.values()):
            return f"attack.suite: {name!r} needs a per-example 'property' column; {source} has none"
        values = np.concatenate([np.asarray(d.attrs["property"]).astype(bool) for d in setting.prior.values()])
        if values.all() or not values.any():
            only = "with" if values.any() else "without"
            return f"attack.suite: {name!r} needs prior examples with and without the property; {source} has only {only}"
    return cls.check(params, setting)
