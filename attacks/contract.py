"""The attack contract: what an attack declares, and the hooks the attack side calls.

An attack is one class (in a module or package of its own) that subclasses ``Attack`` and is found
through the Python entry-point group ``leakbed.attacks`` (``attacks.registry``), built-in and
third-party alike. It declares its name, its parameters (a pydantic model: every field with a
default, a unit and a bound; validated before anything starts and frozen into ``config.toml`` under
``[attack.params.<name>]``), what it needs of the run (``Needs``, plus ``check`` for needs of its
own), where it comes from and what it receives (``source``, ``threat``: the catalog's text), its
attack-side hooks (``on_round`` for each round's global model, ``fit`` and ``predict`` after the
stream) and its referee-side scorer (``scorer``: ``"module:function"``, imported by the referee
only, never on the attack side).

The hooks run in a sandboxed attack worker (``attacks.sandbox``) and see only what a curious server
sees: the ``AttackContext``'s store (anonymous updates, global models, the attacker's own shadow
updates) and knowledge (its prior data, the model and its seed), never a user, node or partition id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from core.data.corpus import Corpus, UserData
from core.params import NoParams, Params
from core.store import UpdateStore

Outputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Needs:
    """What an attack requires of the run, checked before anything starts (``attacks.registry.unmet``)
    so that a config it cannot meet is refused in one line instead of failing after every round."""

    modality: Literal["image", "text"] | None = None  # image (C, H, W) or token examples; None = either
    tasks: frozenset[str] | None = None  # corpus tasks it works on; None = any
    models: frozenset[str] | None = None  # model.name values (auto resolved) it is written for; None = any
    level: Literal["update", "aggregate"] = "update"  # individual updates, or it also reads SecAgg+ aggregates
    full_updates: bool = False  # every parameter's Δw, not only the attack layers
    records: bool = False  # per-sample truth: devices seal which records (and their properties) their batches used
    property_column: bool = False  # a per-example 'property' attribute, with and without it in the prior
    participation: bool = False  # each round's sampled nodes, as per-run keyed pseudonyms
    plain_sgd: bool = False  # Δw = η·Σ gradients: fl.optimizer 'sgd' without momentum (gradient inversion)


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


@dataclass
class AttackContext:
    """What a hook gets: the store it reads and writes, the attacker's knowledge, its parameters, and its
    own seed; ``name`` is what its outputs are filed under (the attack's name, or a study's variant)."""

    name: str
    store: UpdateStore
    knowledge: AttackerKnowledge
    params: Any  # the attack's Params instance
    state: dict[str, Any] = field(default_factory=dict)  # fit → predict, within one task

    @property
    def seed(self) -> int:
        return self.knowledge.seed


class Attack:
    """Subclass it, set the class attributes, override the hooks the attack uses.

    A fresh instance runs each task: ``on_round`` once per round (auxiliary updates on the round's global
    model, say), then, after the stream, ``fit`` and ``predict`` in one task (an instance attribute set in
    ``fit`` is there in ``predict``); ``predict`` returns the outputs filed under ``ctx.name`` for the
    scorer, a dict of NumPy arrays."""

    name: ClassVar[str]
    params: ClassVar[type[Params]] = NoParams
    needs: ClassVar[Needs] = Needs()
    source: ClassVar[str] = ""  # the seed (file, section) or paper it implements
    threat: ClassVar[str] = ""  # what it receives, and from whom
    scorer: ClassVar[str] = ""  # "module:function" of its referee-side scorer
    family: ClassVar[Literal["reid", "other"]] = "other"  # reid: a row of the closed-world table (seed 001 Table 3)

    @classmethod
    def check(cls, params: Any, setting: Setting) -> str | None:  # noqa: ARG003 - for subclasses
        """A one-line reason this run cannot serve the attack, beyond ``needs`` (its own parameters against the data)."""
        return None

    def on_round(self, ctx: AttackContext, snapshot: RoundSnapshot) -> None:
        """Per round, with the round's global model and the training config the server sent."""

    def fit(self, ctx: AttackContext) -> None:
        """After the stream: learn from what the store holds."""

    def predict(self, ctx: AttackContext) -> Outputs:
        """The attack's outputs, filed under ``ctx.name`` for the referee."""
        raise NotImplementedError(f"attack {self.name!r} has no predict hook")


@dataclass(frozen=True)
class Scores:
    """Per-update scores over the known identities (higher = more likely)."""

    classes: np.ndarray
    scores: np.ndarray


class ReidAttack(Attack):
    """Closed-world re-identification (seed 001 §4.3, §6.1.1): a classifier trained on the attacker's labelled
    shadow updates scores every anonymous update over the identities it knows. ``classify`` is the family's
    own hook (other attacks fuse with it, e.g. metadata and linkage); ``predict`` applies it to the store."""

    family: ClassVar[Literal["reid", "other"]] = "reid"
    scorer: ClassVar[str] = "referee.score_reid:score"
    # what ``classify``'s scores are: class probabilities, or margins (a linear SVM's), which fusing attacks softmax
    score_kind: ClassVar[Literal["probability", "margin"]] = "probability"
    threat: ClassVar[str] = (
        "the honest-but-curious server: anonymous update vectors and their rounds (from the shuffler), and its own "
        "shadow updates computed on its prior data about known users, labelled by identity"
    )

    def classify(self, params: Any, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        raise NotImplementedError

    def predict(self, ctx: AttackContext) -> Outputs:
        x_train, y_train, _ = ctx.store.read_shadow()
        anon = ctx.store.read_anon()
        s = self.classify(ctx.params, ctx.seed, x_train, y_train, anon["vectors"])
        return {"ids": anon["ids"], "rounds": anon["round"], "classes": s.classes, "scores": s.scores}
