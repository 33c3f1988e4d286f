"""The attack contract: what an attack declares, and the hooks its sandboxed lane calls.

An attack is one class (in a module or package of its own) that subclasses ``Attack`` and is found through the
Python entry-point group ``leakbed.attacks`` (``attacks.registry``), built-in and third-party alike. It declares
its name, its parameters (a pydantic model: every field with a default, a unit and a bound; checked against its
schema and by the model itself, in a sandbox, before anything starts, and frozen into ``config.toml`` under
``[attack.params.<name>]``), what it needs of the run (``Needs``, plus ``check`` for needs of its own), where it
comes from and what it receives (``source``, ``threat``: the catalog's text), how it is scored (``scorer``: one
of the referee's scorer kinds, or its own function run in the scoring sandbox: ``Scoring``), the attacks whose
outputs it reads (``builds_on``), and its hooks (``on_round`` for each round's global model, ``fit`` and
``predict`` after the stream).

Trusted code never imports this module's subclasses: it learns the declaration as data from a sandboxed
introspection (``workers.introspect``). The hooks run in the attack's own sandbox (one per attack and prior: a
*lane*) and see only what a curious server sees: read-only inputs written by trusted code (``AttackContext.store``:
anonymous updates, global models, the attacker's shadow updates; ``knowledge``: its prior data, the model and its
seed), never a user, node or partition id; they write only their own output folder (``AttackContext.folder``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.declaration import Needs, Scoring, Setting
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.params import NoParams, P, Params, bind_params
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore

Outputs = dict[str, np.ndarray]
__all__ = ["Attack", "AttackContext", "Corpus", "Needs", "Outputs", "ReidAttack", "Scores", "Scoring", "Setting",
           "UserData", "Params", "NoParams", "RoundSnapshot"]


@dataclass
class AttackContext(Generic[P]):
    """What a hook gets: read-only views of its inputs, the attacker's knowledge, its parameters, its own writable
    folder, and the outputs of the attacks it builds on; ``name`` is what its outputs are filed under (the
    attack's name, or a study's variant).

    Δw, everywhere: ``w_global - w_local``, the global model the device received minus the model it sent back
    (``store.read_global(r)`` is the model the devices of round ``r`` started from), so a device's local model is
    ``read_global(r)[k] - Δw[k]``."""

    name: str
    store: InputsView
    knowledge: AttackerKnowledge
    params: P  # the attack's own Params model, validated (``Attack[P]``: a type checker knows its fields)
    folder: Path = Path("/leakbed/out")  # its own output folder (a tmpfs under a quota): per-round state, figures
    upstream: dict[str, Path] = field(default_factory=dict)  # attack name -> its outputs (.npz), read-only
    # what it may know of the attacks it builds on: name -> {"params", "score_kind", "builtin"}
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)  # fit → predict, within one task

    @property
    def seed(self) -> int:
        """The attacker's own seed (never the experiment's)."""
        return self.knowledge.seed

    @property
    def workspace(self) -> UpdateStore:
        """Its own folder as a store of ``.npz`` files (per-round state its ``fit`` reads back): writable by it only."""
        return UpdateStore(self.folder)

    def read_upstream(self, name: str) -> Outputs | None:
        """The outputs of attack ``name`` this one builds on (``Attack.builds_on``), or None when it has none."""
        path = self.upstream.get(name)
        if path is None or not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}


class Attack(Generic[P]):
    """Subclass it with its own parameters' model, ``class MyAttack(Attack[MyParams])`` (``Attack[NoParams]`` for
    none), set the class attributes, override the hooks the attack uses. ``params`` is that model (set from the
    subscript when the class does not set it; a different one is refused at import).

    A fresh instance runs each task: ``on_round`` once per round (auxiliary updates on the round's global
    model, say), then, after the stream, ``fit`` and ``predict`` in one task (an instance attribute set in
    ``fit`` is there in ``predict``); ``predict`` returns the outputs filed under ``ctx.name`` for the
    scorer, a dict of NumPy arrays."""

    name: ClassVar[str]
    params: ClassVar[type[Params]] = NoParams
    needs: ClassVar[Needs] = Needs()
    source: ClassVar[str] = ""  # the seed (file, section) or paper it implements
    threat: ClassVar[str] = ""  # what it receives, and from whom
    # how the referee scores it: a scorer kind of ``referee.kinds`` by name ("reid", "reconstruction"...), or a
    # ``Scoring`` (kind "plugin" with its own function and the truth fields it needs, run in the scoring sandbox)
    scorer: ClassVar[str | Scoring] = ""
    family: ClassVar[Literal["reid", "other"]] = "other"  # reid: a closed-world table row (seed 001 Table 3), referee-scored
    builds_on: ClassVar[tuple[str, ...]] = ()  # attacks (or "family:reid") whose outputs it reads, once written
    budget: ClassVar[str] = ""  # a params field: its own task deadline [s], at most workers.task_deadline; "" = that

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bind_params(cls, Attack)

    @classmethod
    def check(cls, params: P, setting: Setting) -> str | None:  # noqa: ARG003 - for subclasses
        """A one-line reason this run cannot serve the attack, beyond ``needs`` (its own parameters against the data)."""
        return None

    def on_round(self, ctx: AttackContext[P], snapshot: RoundSnapshot) -> None:
        """Per round, with the round's global model and the training config the server sent."""

    def fit(self, ctx: AttackContext[P]) -> None:
        """After the stream: learn from what the store holds."""

    def predict(self, ctx: AttackContext[P]) -> Outputs:
        """The attack's outputs, filed under ``ctx.name`` for the referee: NumPy arrays (numbers, booleans or text;
        never objects) in the form its scorer kind expects (``docs/reference/plugin-api.md``)."""
        raise NotImplementedError(f"attack {self.name!r} has no predict hook")


@dataclass(frozen=True)
class Scores:
    """Per-update scores over the known identities (higher = more likely)."""

    classes: np.ndarray
    scores: np.ndarray


class ReidAttack(Attack[P]):
    """Closed-world re-identification (seed 001 §4.3, §6.1.1): a classifier trained on the attacker's labelled
    shadow updates scores every anonymous update over the identities it knows. ``classify`` is the family's
    own hook (other attacks fuse with it, e.g. metadata and linkage); ``predict`` applies it to the store."""

    family: ClassVar[Literal["reid", "other"]] = "reid"
    scorer: ClassVar[str | Scoring] = "reid"
    # what ``classify``'s scores are: class probabilities, or margins (a linear SVM's), which fusing attacks softmax
    score_kind: ClassVar[Literal["probability", "margin"]] = "probability"
    threat: ClassVar[str] = (
        "the honest-but-curious server: anonymous update vectors and their rounds (from the shuffler), and its own "
        "shadow updates computed on its prior data about known users, labelled by identity"
    )

    def classify(self, params: P, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        """Scores of every row of ``x_test`` over the identities of ``y_train`` (the attacker's labelled shadow updates)."""
        raise NotImplementedError

    def predict(self, ctx: AttackContext[P]) -> Outputs:
        x_train, y_train, _ = ctx.store.read_shadow()
        anon = ctx.store.read_anon()
        s = self.classify(ctx.params, ctx.seed, x_train, y_train, anon["vectors"])
        return {"ids": anon["ids"], "rounds": anon["round"], "classes": s.classes, "scores": s.scores}
