"""What one of leakbed's scorer kinds gets (``referee.kinds``): an attack's outputs and the truth to join them with.

A kind's scorer is a function ``score(ctx: ScoreContext) -> dict`` of the referee's own (the referee runs no plugin
code: a plugin's own scorer runs in the scoring sandbox, ``workers.scoring``). It returns a JSON-able dict: scalar
metrics at the top level (``ap``, ``auc``, ``chance``...) with the coverage fields (``referee.coverage``), optional
``tables`` ({title: {"header": [...], "rows": [[...]]}}), ``figures`` (paths relative to the prior's results folder),
``notes`` (lines for the report) and ``exports`` ({name: metrics} shown as further attacks on the dashboards).

The outputs are what trusted code (the pool) checked and filed from the attack's sandbox, ``<outputs_dir>/<name>.npz``,
with the ids of every update its fit was given, ``<name>.given.npy``; both are read with ``allow_pickle=False`` and
the outputs are checked against the kind's schema (``referee.schemas``) before a scorer sees them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core.config import ExperimentConfig
from leakbed.core.data import Federation, federation
from leakbed.core.declaration import Scoring
from leakbed.core.knowledge import KNOWLEDGE_ARRAYS, KNOWLEDGE_JSON, AttackerKnowledge
from leakbed.core.store import UpdateStore
from leakbed.referee.schemas import OUTPUTS, OutputsError, check_outputs
from leakbed.referee.truth import Referee


def _frozen(value: Any) -> Any:
    if isinstance(value, ParamsView):
        return value
    if isinstance(value, Mapping):
        return ParamsView(value)
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, ParamsView):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class ParamsView(Mapping[str, Any]):
    """A frozen, read-only view of an attack's validated params (a JSON dict): keys as attributes, recursively
    (``ctx.params.siamese.eval_pairs``), lists as tuples. Nothing can be set or deleted."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", {str(k): _frozen(v) for k, v in (data or {}).items()})

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key == "_data":
            raise AttributeError(key)
        try:
            return self._data[key]
        except KeyError:
            have = ", ".join(sorted(self._data)) or "none"
            raise AttributeError(f"params have no {key!r} (have: {have})") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"params are read-only (cannot set {key!r})")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"params are read-only (cannot delete {key!r})")

    def __reduce__(self) -> tuple:
        return (ParamsView, (self.to_dict(),))

    def __repr__(self) -> str:
        return f"ParamsView({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        """A plain (JSON) copy: what a plugin's scorer is handed."""
        return {k: _plain(v) for k, v in self._data.items()}


@dataclass
class ScoreContext:
    """One attack's outputs (under ``name``: the attack's name, or a study's variant), its validated params, its
    declared scoring (kind, notes, reference), the sealed truth of the run's prior, the store the attack side read,
    the frozen experiment, where figures go (``out``) and where its outputs were filed (``outputs_dir``)."""

    attack: str  # the attack's plugin name
    name: str  # what its outputs are filed under
    params: ParamsView
    scoring: Scoring
    truth: Referee
    store: UpdateStore
    cfg: ExperimentConfig
    rule: str
    out: Path  # figures
    outputs_dir: Path
    groups: dict[str, set[str]] | None = None  # users by group (defending / not defending), for per-group metrics
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.params, ParamsView):
            self.params = ParamsView(self.params)

    @cached_property
    def outputs(self) -> dict[str, np.ndarray]:
        """The attack's outputs as the pool filed them, checked against its kind's schema (``OutputsError``: one
        line naming the array)."""
        path = self.outputs_dir / f"{self.name}.npz"
        if not path.is_file():
            raise OutputsError(f"outputs: nothing filed for {self.name!r} (no {path.name})")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except ValueError as err:  # an object array: the pool refuses them, so the file is not the pool's
            raise OutputsError(f"outputs: {path.name} cannot be read without pickle: {err}") from None
        schema = OUTPUTS.get(self.scoring.kind)
        if schema is not None:
            check_outputs(arrays, schema)
        return arrays

    @cached_property
    def given(self) -> np.ndarray:
        """The ids of every anonymous update the attack's fit was given (the pool's ``<name>.given.npy``); where
        there is no such file (outputs filed before the pool wrote one), every update in the store."""
        path = self.outputs_dir / f"{self.name}.given.npy"
        if path.is_file():
            return np.asarray(np.load(path, allow_pickle=False)).astype(str).ravel()
        return np.asarray(self.store.anon_ids()).astype(str)

    @cached_property
    def _knowledge_doc(self) -> dict | None:
        path = self.store.root / KNOWLEDGE_JSON
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    @cached_property
    def known_users(self) -> tuple[str, ...]:
        """The users the referee holds for this prior: those the attacker's knowledge lists (trusted code wrote it into
        the store the attack read, ``core.knowledge``; the attack cannot write there), in its order; for a store filed
        without one (by hand, in tests), the owners of every sealed update, sorted. Never the attack's own list."""
        doc = self._knowledge_doc
        if doc is not None:
            return tuple(str(u["id"]) for u in doc["users"])
        return tuple(sorted({str(r["user_id"]) for r in self.truth.records()}))

    @property
    def attacker_seed(self) -> int | None:
        """The attacker's own seed as its knowledge carries it (the seeded user splits its params define are
        recomputed with it, ``core.attack_sets``); None without a knowledge file."""
        doc = self._knowledge_doc
        return int(doc["seed"]) if doc is not None else None

    @cached_property
    def knowledge(self) -> AttackerKnowledge | None:
        """The attacker's knowledge, arrays included (its prior data), as trusted code filed it; None without one."""
        if self._knowledge_doc is None or not (self.store.root / KNOWLEDGE_ARRAYS).is_file():
            return None
        return AttackerKnowledge.load(self.store.root)

    @property
    def seed(self) -> int:
        """The experiment seed: for the referee's own draws (test pairs, non-members), never given to an attack."""
        return self.cfg.seed

    @cached_property
    def federation(self) -> Federation:
        """The run's federation, rebuilt from the frozen config (the referee may read the devices' data)."""
        return federation(self.cfg, self.rule)
