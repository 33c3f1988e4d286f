"""The referee's side of a live run: scores what the attack side wrote against the sealed truth.

It implements ``server.judge.Judge``; the product builds one per prior, with the suite's declarations, and hands it
to the run. The truth is read back from the referee's folder each time, so interim scores see what has been sealed
so far. Outputs are read from ``layout.outputs(rule)``, where the pool filed them.
"""

from __future__ import annotations

import logging

from leakbed.core.config import ExperimentConfig
from leakbed.core.declaration import Declaration
from leakbed.core.derive import derived_seed
from leakbed.core.layout import RunLayout
from leakbed.core.store import UpdateStore
from leakbed.referee.canaries import CanaryAudit
from leakbed.referee.context import ScoreContext
from leakbed.referee.noise import noise_secret
from leakbed.referee.schemas import OutputsError
from leakbed.referee.score_participant import score_participants
from leakbed.referee.scorers import score_one
from leakbed.referee.truth import Referee

log = logging.getLogger(__name__)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


class RunJudge:
    def __init__(self, cfg: ExperimentConfig, layout: RunLayout, rule: str, declarations: dict[str, Declaration]) -> None:
        self._cfg = cfg
        self._rule = rule
        self._declarations = declarations
        self._folder = layout.referee(rule)
        self._store = UpdateStore(layout.store(rule))
        self._out = layout.results(rule)
        self._outputs = layout.outputs(rule)

    def canaries(self, keys: list[str], shapes: dict[str, tuple], norm: float) -> CanaryAudit:
        """The privacy audit's canaries (``audit.*``) over the model entries ``keys``: their secret stays here."""
        audit = self._cfg.audit
        return CanaryAudit(audit.canaries, audit.rate, norm, keys, shapes, derived_seed(self._cfg.seed, "audit"))

    def noise_secret(self) -> int:
        """The run's DP noise secret, kept in the referee's folder (``referee.noise``)."""
        return noise_secret(self._folder)

    def _context(self, name: str, truth: Referee, groups: dict[str, set[str]] | None = None) -> ScoreContext:
        decl = self._declarations[name]
        params = self._cfg.attack.params.get(name, decl.params_defaults)  # validated and completed with defaults
        return ScoreContext(
            attack=decl.name,
            name=name,
            params=params,
            scoring=decl.scoring,
            truth=truth,
            store=self._store,
            cfg=self._cfg,
            rule=self._rule,
            out=self._out,
            outputs_dir=self._outputs,
            groups=groups,
        )

    def interim(self, name: str) -> dict:
        return score_one(self._declarations[name], self._context(name, Referee.load(self._folder)))

    def score(self, names: list[str], groups: dict[str, set[str]] | None) -> dict[str, dict]:
        """Each attack's metrics; a scorer that raises gives ``{"scorer_failed": <one line>}`` (logged whole)
        instead of losing the other attacks' scores; outputs that are not what the kind expects give that line."""
        truth, out = Referee.load(self._folder), {}
        for name in names:
            try:
                out[name] = score_one(self._declarations[name], self._context(name, truth, groups))
            except OutputsError as err:  # the attack's outputs, not our code: one line, no traceback
                log.warning("scoring %s: %s", name, err)
                out[name] = {"scorer_failed": _one_line(str(err))}
            except Exception as err:  # noqa: BLE001 - one attack's scorer must not cost the run its other scores
                log.exception("scoring %s failed", name)
                first = str(err).splitlines()[0] if str(err) else ""
                out[name] = {"scorer_failed": _one_line(f"scorer failed: {type(err).__name__}: {first}")}
        return out

    def participants(self) -> dict:
        if not self._cfg.adversary.users:
            return {}
        return {"active-property": score_participants(self._folder, self._cfg)}

    def users_sealed(self) -> int:
        """How many distinct users the sealed updates came from (SecAgg+ aggregates: their members)."""
        owners: set[str] = set()
        for record in Referee.load(self._folder).records():
            owners.update(str(record["user_id"]).removeprefix("aggregate:").split())
        return len(owners)
