"""The referee's side of a live run: scores what the attack side wrote against the sealed truth.

It implements ``server.judge.Judge``; the product builds one per prior and hands it to the run.
The truth is read back from the referee's folder each time, so interim scores see what has been
sealed so far.
"""

from __future__ import annotations

from core.config import ExperimentConfig
from core.layout import RunLayout
from core.store import UpdateStore
from referee.score_participant import score_participants
from referee.scorers import score_suite
from referee.truth import Referee


class RunJudge:
    def __init__(self, cfg: ExperimentConfig, layout: RunLayout, rule: str) -> None:
        self._cfg = cfg
        self._rule = rule
        self._folder = layout.referee(rule)
        self._store = UpdateStore(layout.store(rule))
        self._out = layout.results(rule)

    def _referee(self) -> Referee:
        return Referee.load(self._folder)

    def interim(self, name: str) -> dict:
        if name in self._cfg.attack.attackers:
            return self._referee().score(self._store, name)
        return score_suite(self._referee(), self._store, self._cfg, self._out, [name])[name]

    def attackers(self, names: list[str], groups: dict[str, set[str]] | None) -> dict[str, dict]:
        referee = self._referee()
        return {name: referee.score(self._store, name, groups) for name in names}

    def suite(self, names: list[str]) -> dict[str, dict]:
        return score_suite(self._referee(), self._store, self._cfg, self._out, names)

    def participants(self) -> dict:
        if not self._cfg.adversary.users:
            return {}
        return {"active-property": score_participants(self._folder, self._cfg)}
