"""An attack as trusted code knows it: its declaration, data only.

Trusted processes (the CLI, the ServerApp, the referee, the studies) never import an attack's module. What they
need of it (its name, its parameters in leakbed's own params language with defaults and bounds, what it needs of
the run, where it comes from, what it receives, how it is scored) comes back as bounded JSON from an introspection
run in a sandbox (``workers.introspect``) and is checked here, by leakbed's own models, before anything uses it.
A run's parameters are checked against the declared fields by leakbed's own bounded checker
(``core.param_schema``): no schema, pattern or reference of the plugin's is ever evaluated here. The attack's
own validators and check hook run in a sandbox before start (``workers.checks``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.param_schema import ParamSchema, check_table
from leakbed.core.param_schema import ParamsError as ParamsError  # where the rooms have always found it

NAME = r"[a-z][a-z0-9-]{0,39}"  # a plugin's name (core.config's rule)
FIELD = r"[A-Za-z][A-Za-z0-9_-]{0,63}"  # a truth field, an option key
Name = Annotated[str, StringConstraints(pattern=f"^{NAME}$")]
Text = Annotated[str, StringConstraints(max_length=2000)]
Line = Annotated[str, StringConstraints(max_length=500)]
Key = Annotated[str, StringConstraints(pattern=f"^{FIELD}$")]
FAMILY_PREFIX = "family:"  # builds_on = ("family:reid",): every attack of that family in the suite


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Needs(Frozen):
    """What an attack requires of the run, checked before anything starts (``unmet``) in every entry point, so that a
    config it cannot meet is refused in one line instead of failing after every round."""

    modality: Literal["image", "text"] | None = Field(None, description="image (C, H, W) or token examples; None = either")
    tasks: frozenset[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        None, max_length=32, description="corpus tasks it works on (multiclass, multilabel, lm...); None = any"
    )
    models: frozenset[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        None, max_length=32, description="model.name values ('auto' resolved) it is written for; None = any"
    )
    level: Literal["update", "aggregate"] = Field(
        "update", description="individual anonymous updates, or it also reads SecAgg+ aggregates (runs under secagg+)"
    )
    full_updates: bool = Field(False, description="every parameter's Δw, not only the attack layers' vector")
    records: bool = Field(
        False, description="per-sample truth: devices seal which records (and their properties) their batches used"
    )
    property_column: bool = Field(False, description="a per-example 'property' attribute, with and without it in the prior")
    participation: bool = Field(False, description="each round's sampled nodes, as per-run keyed pseudonyms")
    plain_sgd: bool = Field(
        False, description="Δw = η·Σ gradients: fl.optimizer 'sgd' without momentum (gradient inversion)"
    )


def _option_value(value: Any) -> Any:
    if not isinstance(value, str | int | float | bool) or (isinstance(value, str) and len(value) > 500):
        raise ValueError("an option is a number, a boolean or a string of at most 500 characters")
    return value


class Scoring(Frozen):
    """How the referee scores an attack: one of leakbed's scorer kinds (``referee.kinds``), fed the attack's outputs
    in the form that kind expects, or ``plugin``: the attack's own function, run in the scoring sandbox with only the
    truth fields it declares here."""

    kind: Annotated[str, StringConstraints(pattern=f"^{NAME}$")] = Field(
        description="a scorer kind of referee.kinds, or 'plugin'"
    )
    function: Annotated[str, StringConstraints(max_length=200, pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")] = Field(
        "", description="kind 'plugin': its scorer as 'module:function', run in the scoring sandbox"
    )
    truth: tuple[Annotated[str, StringConstraints(pattern=f"^{FIELD}$")], ...] = Field(
        (), max_length=16, description="kind 'plugin': the sealed truth fields it receives (user_id, round, a device fact)"
    )
    notes: tuple[Line, ...] = Field((), max_length=8, description="lines the report prints under its scores")
    reference: dict[Key, Annotated[Any, AfterValidator(_option_value)]] = Field(
        {}, max_length=16, description="a paper's figures beside ours (name: number or text)"
    )

    @model_validator(mode="after")
    def _plugin_function(self) -> Scoring:
        if (self.kind == "plugin") != bool(self.function):
            raise ValueError("kind 'plugin' names its function as 'module:function'; other kinds name none")
        if self.truth and self.kind != "plugin":
            raise ValueError("only kind 'plugin' declares truth fields")
        return self


class Declaration(Frozen):
    """One attack, as its sandboxed introspection declared it and leakbed checked it."""

    name: Name
    family: Literal["reid", "other"] = "other"
    params: ParamSchema = Field(
        default_factory=ParamSchema, description="its parameters in leakbed's params language (core.param_schema)"
    )
    validates: bool = Field(
        False, description="it checks more than its params declaration says: its model's own validators or constraints "
        "(run in a sandbox before start), or a check hook"
    )
    check_hook: bool = Field(False, description="it has a check hook over the run's data: run once per prior, in a sandbox")
    needs: Needs = Needs()
    source: Text = ""
    threat: Text = ""
    scoring: Scoring
    on_round: bool = Field(False, description="it has a per-round hook (its lane starts with the run)")
    builds_on: tuple[Annotated[str, StringConstraints(max_length=64)], ...] = Field(
        (), max_length=16, description="attacks (or 'family:reid') whose outputs it reads, read-only, once written"
    )
    score_kind: Literal["probability", "margin"] = "probability"
    budget: Annotated[str, StringConstraints(pattern=f"^({FIELD})?$")] = Field(
        "", description="a params field holding its own task deadline [s]; '' = workers.task_deadline"
    )
    distribution: Annotated[str, StringConstraints(max_length=200)] = ""
    version: Annotated[str, StringConstraints(max_length=100)] = ""

    @model_validator(mode="after")
    def _budget_is_a_number(self) -> Declaration:
        field = self.params.field(self.budget) if self.budget else None
        if self.budget and (field is None or field.type not in ("int", "float") or field.optional):
            raise ValueError(f"budget names {self.budget!r}, which is not a numeric field of its params")
        if self.check_hook and not self.validates:
            raise ValueError("an attack with a check hook validates")
        return self

    @property
    def params_defaults(self) -> dict[str, Any]:
        """Its params with every default (an optional field left unset)."""
        return self.params.defaults()

    def upstream(self, suite: list[str], declarations: dict[str, Declaration]) -> list[str]:
        """The attacks of ``suite`` this one builds on, in suite order."""
        wanted = set(self.builds_on)
        families = {b.removeprefix(FAMILY_PREFIX) for b in wanted if b.startswith(FAMILY_PREFIX)}
        return [n for n in suite if n != self.name and (n in wanted or declarations[n].family in families)]


def check_params(decl: Declaration, table: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """``table`` completed with the declared defaults and checked against the declared fields (trusted side, leakbed's
    own bounded checker); a ``ParamsError`` names the key (``where``: e.g. ``attack.params.mlp``) and, for an unknown
    one, the closest and the valid names."""
    return check_table(decl.params, table, where, decl.name)


@dataclass(frozen=True)
class Setting:
    """The run as an attack's needs see it before anything starts: the data, the attacker's prior and the
    training the devices will do."""

    source: str  # "data.source 'synthetic' (synthetic)": how one-line refusals name the data
    corpus: Corpus  # the corpus' shape (its users may be left out)
    prior: dict[str, UserData]  # the attacker's prior data by identity
    model: str  # model.name, 'auto' resolved
    parameters: tuple[str, ...]  # the model's parameter names
    optimizer: str
    momentum: float
    local_steps: int
    secure_aggregation: bool


def unmet(decl: Declaration, setting: Setting) -> str | None:
    """The one-line reason why the declared attack cannot run in ``setting``, or None (its own ``check`` hook, if
    any, runs in a sandbox after this)."""
    name, needs, corpus, source = decl.name, decl.needs, setting.corpus, setting.source
    modality = "image" if len(corpus.input_shape) == 3 else "text"
    if setting.secure_aggregation and needs.level != "aggregate":
        return (
            f"attack.suite: {name!r} needs individual updates, but fl.secure_aggregation = 'secagg+' shows the server "
            "only aggregates (keep the attacks that read aggregates, e.g. 'aggregate-property')"
        )
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
    return None


def needs_of(declarations: dict[str, Declaration], names: list[str], flag: str) -> bool:
    """Whether any of ``names`` declares the boolean need ``flag`` (full_updates, records, participation)."""
    return any(getattr(declarations[n].needs, flag) for n in names)


def reid_names(declarations: dict[str, Declaration], suite: list[str]) -> list[str]:
    """The suite's closed-world re-identification attacks (family ``reid``) that the referee scores, in suite order:
    the rows of the headline tables. An attack scored by its own plugin scorer is never one (its numbers are not the
    referee's: ``plugin_scored``)."""
    return [n for n in suite if declarations[n].family == "reid" and declarations[n].scoring.kind != "plugin"]


def plugin_scored(declarations: dict[str, Declaration], suite: list[str]) -> list[str]:
    """The suite's attacks scored by their own plugin scorer (in the scoring sandbox), in suite order: reported apart
    from the referee's numbers, marked as the plugin's, never in a headline table."""
    return [n for n in suite if declarations[n].scoring.kind == "plugin"]


def valid_name(name: str) -> bool:
    return re.fullmatch(NAME, name) is not None
