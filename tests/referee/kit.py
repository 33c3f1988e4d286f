"""A run as the referee sees it, written by hand in a test's tmp_path: sealed truth, the store's anonymous updates,
an attack's outputs and the ids it was given, filed where ``core.layout.RunLayout`` puts them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core.config import ExperimentConfig
from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.layout import RunLayout
from leakbed.core.store import UpdateStore
from leakbed.referee.context import ScoreContext
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee

RULE = "random"


@dataclass(frozen=True)
class Update:
    uid: str
    user: str
    round: int = 1
    fields: dict[str, Any] | None = None


def declaration(name: str, scoring: Scoring) -> Declaration:
    return Declaration(name=name, scoring=scoring)


def write_run(tmp: Path, updates: list[Update]) -> RunLayout:
    """Seal every update's truth and file it in the store (a 1-d vector each), by round."""
    layout = RunLayout(tmp / "run")
    sealer = Sealer(layout.referee(RULE))
    store = UpdateStore(layout.store(RULE))
    for u in updates:
        sealer.seal(u.uid, u.user, u.round, u.fields)
    for rnd in sorted({u.round for u in updates}):
        ids = [u.uid for u in updates if u.round == rnd]
        store.write_anon(rnd, "b0", ids, np.zeros((len(ids), 1), np.float32), np.full(len(ids), 10))
    layout.results(RULE).mkdir(parents=True, exist_ok=True)
    return layout


def file_outputs(layout: RunLayout, name: str, outputs: dict[str, np.ndarray], given: list[str] | None = None) -> None:
    """What the pool files: the outputs and, unless None, the ids the attack's fit was given."""
    folder = layout.outputs(RULE)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.npz").open("wb") as f:
        np.savez(f, **outputs)
    if given is not None:
        np.save(folder / f"{name}.given.npy", np.asarray(given, dtype=str))


def context(
    layout: RunLayout,
    name: str,
    kind: str,
    params: dict[str, Any] | None = None,
    cfg: ExperimentConfig | None = None,
    attack: str = "",
) -> ScoreContext:
    return ScoreContext(
        attack=attack or name,
        name=name,
        params=params or {},
        scoring=Scoring(kind=kind, function="its.scoring:score" if kind == "plugin" else ""),
        truth=Referee.load(layout.referee(RULE)),
        store=UpdateStore(layout.store(RULE)),
        cfg=cfg or ExperimentConfig(),
        rule=RULE,
        out=layout.results(RULE),
        outputs_dir=layout.outputs(RULE),
    )
