"""The base of every plugin's parameters (an attack's, a defense's): a pydantic model whose unknown keys are errors
and whose values are frozen. Core knows only this base; each plugin declares its own fields, each with a default,
a unit and a bound."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Subclass it with the plugin's fields: ``Field(default, ge=..., le=..., description="... [unit]")``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(Params):
    """For a plugin without parameters."""
