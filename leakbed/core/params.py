"""The base of every plugin's parameters (an attack's, a defense's): a pydantic model whose unknown keys are errors
and whose values are frozen. Core knows only this base; each plugin declares its own fields, each with a default,
a unit and a bound.

``P`` is the type variable the contracts are generic over (``Attack[P]``, ``AttackContext[P]``, ``Defense[P]``,
``ScoreContext[P]``): a plugin names its own model once, ``class MyAttack(Attack[MyParams])``, and a type checker
then knows ``ctx.params`` is a ``MyParams``. ``bind_params`` makes the runtime agree with what the checker was told.
"""

from __future__ import annotations

import typing
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from leakbed.core.entry_points import PluginError


class Params(BaseModel):
    """Subclass it with the plugin's fields: ``Field(default, ge=..., le=..., description="... [unit]")``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(Params):
    """For a plugin without parameters."""


P = TypeVar("P", bound=Params)


def bind_params(cls: type, base: type) -> None:
    """Make a plugin class's ``params`` the model its generic base names: ``class A(Attack[MyParams])`` without a
    ``params`` attribute gets ``params = MyParams``; one that sets ``params`` to a model that is not ``MyParams`` (or a
    subclass) is refused at import (``PluginError``, one line), since its hooks would get another model than their
    types say. A base left unparameterized (``class A(Attack)``) keeps whatever ``params`` it sets."""
    for parent in getattr(cls, "__orig_bases__", ()):
        origin, args = typing.get_origin(parent), typing.get_args(parent)
        if not (isinstance(origin, type) and issubclass(origin, base) and args):
            continue
        named = args[0]
        if not (isinstance(named, type) and issubclass(named, Params)):
            continue  # still generic (``class ReidAttack(Attack[P])``), or not a model: nothing to bind
        own = cls.__dict__.get("params")
        if own is None:
            setattr(cls, "params", named)  # noqa: B010 - a ClassVar of the class, set once at its creation
        elif not (isinstance(own, type) and issubclass(own, named)):
            shown = getattr(own, "__name__", repr(own))
            subscript = f"{origin.__name__}[{named.__name__}]"
            raise PluginError(f"{cls.__module__}.{cls.__name__}: params = {shown}, but it subclasses {subscript}")
        return
