"""The referee's side of a live run: scores what the attack side wrote against the sealed truth.

It implements ``server.judge.Judge``; the product builds one per prior and hands it to the run. The truth is
read back from the referee's folder each time, so interim scores see what has been sealed so far.
"""

from __future__ import annotations

import logging

from core.config import ExperimentConfig
from core.layout import RunLayout
from core.store import UpdateStore
from referee.context import ScoreContext
from referee.score_participant import score_participants
from referee.scorers import params_for, score_one
from referee.truth import Referee

log = logging.getLogger(__name__)


class RunJudge:
    def __init__(self, cfg: ExperimentConfig, layout: RunLayout, rule: str) -> None:
        self._cfg = cfg
        self._rule = rule
        self._folder = layout.referee(rule)
        self._store = UpdateStore(layout.store(rule))
        self._out = layout.results(rule)

    def _context(self, name: str, truth: Referee, groups: dict[str, set[str]] | None = None) -> ScoreContext:
        params = params_for(name, self._cfg.attack.params.get(name))
        return ScoreContext(name, name, params, truth, self._store, self._cfg, self._rule, self._out, groups)

    def interim(self, name: str) -> dict:
        return score_one(name, self._context(name, Referee.load(self._folder)))

    def score(self, names: list[str], groups: dict[str, set[str]] | None) -> dict[str, dict]:
        """Each attack's metrics; a scorer that raises gives ``{"scorer_failed": <one line>}`` (logged whole)
        instead of losing the other attacks' scores."""
        truth, out = Referee.load(self._folder), {}
        for name in names:
            try:
                out[name] = score_one(name, self._context(name, truth, groups))
            except Exception as err:  # noqa: BLE001 - a plugin's scorer must not cost the run its other scores
                log.exception("scoring %s failed", name)
                first = str(err).splitlines()[0] if str(err) else ""
                out[name] = {"scorer_failed": f"scorer failed: {type(err).__name__}: {first}"}
        return out

    def participants(self) -> dict:
        if not self._cfg.adversary.users:
            return {}
        return {"active-property": score_participants(self._folder, self._cfg)}
