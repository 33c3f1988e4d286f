"""leakbed's own scorer kinds: the table an attack's declaration chooses from (``Declaration.scoring.kind``).

Each kind is one scoring function of the referee's (``score_*``: pure functions of the attack's outputs, the sealed
truth and the run's data; no plugin code) and the outputs it expects, as a schema (``referee.schemas.OUTPUTS``:
array name -> ``workers.hostile.ArraySpec``, symbolic dims shared across arrays). The outputs are checked against
the schema before the scorer runs (``ScoreContext.outputs``). Every kind covers every update the attack was given
and every class the referee holds for the prior (``referee.coverage``: what an attack omits counts at chance, what it
adds is ignored); how a kind whose rows are not one per update does so, and where its sets come from, is in its
module's docstring.

An attack whose scoring is kind ``plugin`` is scored by its own function in the scoring sandbox
(``referee.scorers.score_one``), never here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from leakbed.referee.context import ScoreContext
from leakbed.referee.schemas import OUTPUTS
from leakbed.workers.hostile import ArraySpec

PLUGIN = "plugin"  # the kind of an attack scored by its own function, in the scoring sandbox


@dataclass(frozen=True)
class Kind:
    """One scorer kind: its function (``leakbed.referee.<module>.<function>``) and the outputs it expects. The
    function's module is imported when a kind scores, not with this table: every command's preflight reads the table
    (names, outputs) and scikit-learn, which most scorers import, costs each such process about a CPU-second."""

    module: str
    function: str
    outputs: Mapping[str, ArraySpec]
    what: str  # one line for the catalog: what it measures

    @property
    def score(self) -> Callable[[ScoreContext], dict]:
        """The kind's scoring function, its module imported on first use."""
        scorer: Callable[[ScoreContext], dict] = getattr(importlib.import_module(f"leakbed.referee.{self.module}"), self.function)
        return scorer


def _kind(name: str, score: str, what: str) -> Kind:
    module, _, function = score.partition(".")
    return Kind(module, function, OUTPUTS[name], what)


KINDS: dict[str, Kind] = {
    "reid": _kind("reid", "score_reid.score", "closed-world re-identification: mean per-user AP, exact chance AP, top-1/5"),
    "matching": _kind("matching", "score_matching.score", "same-user AP / ROC AUC on balanced pairs of anonymous updates"),
    "cross-modal": _kind("cross-modal", "score_cross_modal.score", "AP on balanced (update, user text) pairs and a ranking"),
    "open-world": _kind("open-world", "score_open_world.score", "re-identification over |seen|+1 classes and matching"),
    "profile": _kind("profile", "score_profile.score", "precision@k of users fitting a profile, update-ranking AP"),
    "attributes": _kind("attributes", "score_attributes.score", "top-1 accuracy of attributes and identity, STL and MTL"),
    "property": _kind("property", "score_property.score_property", "ROC AUC of per-update property scores"),
    "aggregate-property": _kind(
        "aggregate-property", "score_property.score_aggregate_property", "ROC AUC of per-round aggregate property scores"
    ),
    "membership": _kind("membership", "score_membership.score_membership", "membership precision / recall (V_r ⊆ V_t)"),
    "reconstruction": _kind(
        "reconstruction", "score_reconstruction.score_reconstruction", "matched per-sample property, PSNR, label accuracy"
    ),
    "linkage": _kind("linkage", "score_linkage.score", "pairwise same-user AP, ARI, re-identification after linking"),
    "metadata": _kind("metadata", "score_metadata.score", "re-identification from report metadata, alone and fused"),
    "redteam": _kind("redteam", "score_redteam.score", "owner / round accuracy of every probe against chance"),
}

assert set(KINDS) == set(OUTPUTS), "every kind has its outputs' schema, and only kinds have one"


def kind_names() -> list[str]:
    """leakbed's kinds, and ``plugin``: what a declaration may name."""
    return [*KINDS, PLUGIN]
