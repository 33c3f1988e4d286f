"""The attacks published under the entry-point group ``leakbed.attacks``, loaded by name, and their declarations.

Runs only inside a sandbox (``workers.inside``): loading an attack imports its module, whose code is untrusted.
Built-in attacks are published by leakbed's own ``pyproject.toml``, third-party ones by theirs; both are found the
same way, by name, and an attack is imported only when asked for (a broken plugin affects only what names it).
``declare`` turns a loaded class into the data trusted code knows it by (``core.declaration.Declaration``), its
params model in leakbed's params language (``attacks.params_language``).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from leakbed.attacks.contract import Attack, Params, ReidAttack
from leakbed.attacks.params_language import declared
from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.entry_points import PluginError, load_declared, published
from leakbed.core.param_schema import ParamSchema

GROUP = "leakbed.attacks"


def names() -> list[str]:
    """Every published attack's name (nothing is imported)."""
    return published(GROUP)


@functools.cache
def attack(name: str) -> type[Attack]:
    """The attack published as ``name``; PluginError when none is, or it is not a well-formed ``Attack``."""
    cls = load_declared(GROUP, name, "attack", Attack)
    scoring(cls)  # a malformed scorer declaration is refused when the attack is loaded
    return cls  # type: ignore[return-value]


def scoring(cls: type[Attack]) -> Scoring:
    """How the referee scores ``cls``: its ``scorer`` as a ``Scoring`` (a kind's name, or a ``Scoring``)."""
    declared = cls.scorer
    if isinstance(declared, Scoring):
        return declared
    if not isinstance(declared, str) or not declared:
        raise PluginError(f"attack {cls.name!r}: scorer must name a scorer kind (e.g. 'reid') or be a leakbed.plugin.Scoring")
    if ":" in declared:  # the old form, "module:function": a scorer of its own, given who sent each update and when
        return Scoring(kind="plugin", function=declared, truth=("user_id", "round"))
    return Scoring(kind=declared)


def params_of(name: str, table: dict[str, Any] | None) -> Params:
    """Attack ``name``'s parameters from its table (defaults for what is left out); pydantic's error on bad ones."""
    return attack(name).params.model_validate(table or {})


def reid_attack(name: str) -> ReidAttack:
    """An instance of a closed-world re-identification attack (the family other attacks fuse with)."""
    cls = attack(name)
    if not issubclass(cls, ReidAttack):
        raise PluginError(f"attack {name!r} is not a closed-world re-identification attack")
    return cls()


def _check_hook(cls: type[Attack]) -> bool:
    return cls.check.__func__ is not Attack.check.__func__  # type: ignore[attr-defined]


def _distribution(name: str) -> tuple[str, str]:
    for ep in entry_points(group=GROUP):
        if ep.name == name and ep.dist is not None:
            return ep.dist.name, ep.dist.version
    return "", ""


def declare(name: str) -> Declaration:
    """What trusted code may know of attack ``name``: its declaration as data, checked by leakbed's model."""
    cls = attack(name)
    try:
        defaults = cls.params.model_validate({}).model_dump(mode="json")
    except Exception as err:  # noqa: BLE001 - a params model with a required field: refused in one line
        raise PluginError(f"attack {name!r}: every parameter needs a default ({type(err).__name__})") from None
    params, beyond = declared(cls.params, name, defaults)
    try:
        return _declaration(cls, name, params, beyond or _check_hook(cls))
    except ValidationError as err:  # one line naming the field, as the trusted side would say it
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PluginError(f"attack {name!r} declares itself wrongly: {where}: {first['msg']}"[:500]) from None


def _declaration(cls: type[Attack], name: str, params: ParamSchema, validates: bool) -> Declaration:
    dist, version = _distribution(name)
    return Declaration(
        name=cls.name,  # the bare name: ``name`` may select it as ``distribution:name``
        family=cls.family,
        params=params,
        validates=validates,
        check_hook=_check_hook(cls),
        needs=cls.needs,
        source=cls.source,
        threat=cls.threat,
        scoring=scoring(cls),
        on_round=cls.on_round is not Attack.on_round,
        builds_on=tuple(cls.builds_on),
        score_kind=getattr(cls, "score_kind", "probability"),
        budget=cls.budget,
        distribution=dist,
        version=version,
    )
